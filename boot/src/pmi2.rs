//! PMI-2 over the socket the launcher hands down in `PMI_FD` (Slurm's
//! `srun --mpi=pmi2`).
//!
//! PMI-2 values are text of at most 1024 bytes in one job-wide key space, so a value is
//! stored base64url-encoded (no `;` or `=` to escape) under `fb<rank>:<key>`, as
//! `<chunks>:<first chunk>`, and any further chunks under `fb<rank>:<key>:<i>`.

mod wire;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use socket2::Socket;

use crate::{check_rank_size, env_u32, fd, Backend, BootError, MAX_VALUE_LEN};

/// Base64 characters per kvs-put: under the 1024-byte value limit of Slurm and MPICH
/// with room for the chunk count.
const CHUNK: usize = 960;

/// The most chunks a value within [`MAX_VALUE_LEN`] needs.
const MAX_CHUNKS: usize = (MAX_VALUE_LEN * 4 / 3 + 4) / CHUNK + 1;

/// A key no rank ever puts (ranks' keys are `fb<digits>:...`), read to wait for all.
const SYNC_KEY: &str = "fb-sync";

/// One session per process: two would interleave their commands on the one socket.
static IN_USE: AtomicBool = AtomicBool::new(false);

#[derive(Debug)]
pub(crate) struct Pmi2 {
    sock: Socket,
    rank: u32,
    size: u32,
    jobid: Option<String>,
    local: Option<(u32, u32)>,
    timeout: Duration,
    /// Whether this session holds [`IN_USE`].
    owns_env: bool,
    finalized: bool,
}

impl Pmi2 {
    pub(crate) fn from_env(timeout: Duration) -> Result<Pmi2, BootError> {
        let fd = env_u32("PMI_FD")?;
        let fd = i32::try_from(fd).map_err(|_| BootError::Env {
            var: "PMI_FD",
            reason: format!("{fd} is not a descriptor number"),
        })?;
        let rank = env_u32("PMI_RANK")?;
        let size = env_u32("PMI_SIZE")?;
        check_rank_size(rank, size, "PMI_RANK/PMI_SIZE")?;
        let jobid = std::env::var("PMI_JOBID").ok();
        if IN_USE.swap(true, Ordering::AcqRel) {
            return Err(BootError::Invalid(
                "a PMI-2 session is already open in this process".into(),
            ));
        }
        let session = fd::dup_socket(fd, "PMI_FD")
            .and_then(|owned| Pmi2::start(Socket::from(owned), rank, size, jobid, timeout));
        match session {
            Ok(mut s) => {
                s.owns_env = true;
                Ok(s)
            }
            Err(e) => {
                IN_USE.store(false, Ordering::Release);
                Err(e)
            }
        }
    }

    /// Speaks PMI-2 on `sock`: version handshake, fullinit, and the process mapping.
    fn start(
        sock: Socket,
        rank: u32,
        size: u32,
        jobid: Option<String>,
        timeout: Duration,
    ) -> Result<Pmi2, BootError> {
        sock.set_read_timeout(Some(timeout))
            .and_then(|()| sock.set_write_timeout(Some(timeout)))
            .map_err(|e| BootError::io("setting PMI_FD timeouts", e))?;
        let mut s = Pmi2 {
            sock,
            rank,
            size,
            jobid,
            local: None,
            timeout,
            owns_env: false,
            finalized: false,
        };
        // Servers read the init line with one read(): it goes out in one write.
        s.write_all(wire::INIT_LINE, "init")?;
        let line = wire::read_init_line(&mut s.sock).map_err(|e| s.timed(e, "init"))?;
        wire::check_init(&line)?;

        let rank_s = rank.to_string();
        let jobid = s.jobid.clone();
        let mut pairs = Vec::new();
        if let Some(j) = &jobid {
            pairs.push(("pmijobid", j.as_str()));
        }
        pairs.push(("pmirank", rank_s.as_str()));
        pairs.push(("threaded", "FALSE"));
        let r = s.call("fullinit", &pairs)?;
        let said = |k: &str| r.get(k).and_then(|v| v.parse::<u32>().ok());
        if said("rank") != Some(rank) || said("size") != Some(size) {
            return Err(BootError::Protocol(format!(
                "PMI-2 fullinit says rank {:?} of {:?}, the environment says {rank} of {size}",
                r.get("rank"),
                r.get("size")
            )));
        }
        // The node layout is optional information: a server without it (or with a
        // layout this parser does not know) leaves the local rank unknown.
        let m = s.call("info-getjobattr", &[("key", "PMI_process_mapping")])?;
        if m.get("found") == Some("TRUE") {
            if let Some(v) = m.get("value") {
                s.local = wire::local_from_mapping(v, rank, size).ok();
            }
        }
        Ok(s)
    }

    fn timed(&self, e: BootError, during: &'static str) -> BootError {
        match e {
            BootError::Timeout { missing, .. } => BootError::Timeout {
                during,
                after: self.timeout,
                missing,
            },
            e => e,
        }
    }

    fn write_all(&mut self, bytes: &[u8], during: &'static str) -> Result<(), BootError> {
        use std::io::Write;
        self.sock.write_all(bytes).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => BootError::Timeout {
                during,
                after: self.timeout,
                missing: vec![],
            },
            _ => BootError::io("writing to the PMI-2 server", e),
        })
    }

    /// Sends `cmd` and returns its checked `<cmd>-response`.
    fn call(&mut self, cmd: &'static str, pairs: &[(&str, &str)]) -> Result<wire::Resp, BootError> {
        let frame = wire::encode(cmd, pairs)?;
        self.write_all(&frame, cmd)?;
        let r = wire::read_resp(&mut self.sock).map_err(|e| self.timed(e, cmd))?;
        r.expect(&format!("{cmd}-response"))
    }

    /// A fence that returns only once every rank has entered it. Slurm's kvs-fence is
    /// such a collective, but MPICH hydra's returns at once and instead holds back a
    /// kvs-get of a missing key until every rank has fenced as often as the asker: a
    /// get of a key nobody puts after the fence makes both servers wait for everyone.
    fn sync(&mut self) -> Result<(), BootError> {
        self.call("kvs-fence", &[])?;
        match self
            .kvs_get(SYNC_KEY)
            .map_err(|e| self.timed(e, "kvs-fence (waiting for every rank)"))?
        {
            None => Ok(()),
            Some(v) => Err(BootError::Protocol(format!(
                "PMI-2: the key {SYNC_KEY}, which nobody puts, has the value {v:?}"
            ))),
        }
    }

    fn kvs_get(&mut self, key: &str) -> Result<Option<String>, BootError> {
        let mut pairs = Vec::new();
        if let Some(j) = &self.jobid {
            pairs.push(("jobid", j.clone()));
        }
        pairs.push(("srcid", "-1".into()));
        pairs.push(("key", key.to_owned()));
        let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = self.call("kvs-get", &refs)?;
        match r.get("found") {
            Some("TRUE") => Ok(Some(
                r.get("value")
                    .ok_or_else(|| {
                        BootError::Protocol("PMI-2 kvs-get: found without value".into())
                    })?
                    .to_owned(),
            )),
            Some("FALSE") => Ok(None),
            other => Err(BootError::Protocol(format!(
                "PMI-2 kvs-get: found={other:?}"
            ))),
        }
    }
}

fn head_key(rank: u32, key: &str) -> String {
    format!("fb{rank}:{key}")
}

/// Splits an encoded value into the head's value and the further chunks.
fn split_value(value: &[u8]) -> (String, Vec<String>) {
    let b64 = URL_SAFE_NO_PAD.encode(value);
    let mut chunks: Vec<String> = b64
        .as_bytes()
        .chunks(CHUNK)
        .map(|c| String::from_utf8(c.to_vec()).expect("base64 is ASCII"))
        .collect();
    if chunks.is_empty() {
        chunks.push(String::new());
    }
    let rest = chunks.split_off(1);
    (format!("{}:{}", rest.len() + 1, chunks[0]), rest)
}

/// Parses a head value: the chunk count and the first chunk.
fn parse_head(head: &str) -> Result<(usize, &str), BootError> {
    let (n, first) = head
        .split_once(':')
        .ok_or_else(|| BootError::Protocol(format!("PMI-2 value head {head:?}")))?;
    let n: usize = n
        .parse()
        .ok()
        .filter(|&n| (1..=MAX_CHUNKS).contains(&n))
        .ok_or_else(|| BootError::Protocol(format!("PMI-2 value head {head:?}")))?;
    Ok((n, first))
}

fn decode_value(b64: &str) -> Result<Vec<u8>, BootError> {
    let v = URL_SAFE_NO_PAD
        .decode(b64)
        .map_err(|e| BootError::Protocol(format!("PMI-2 value is not base64url: {e}")))?;
    if v.len() > MAX_VALUE_LEN {
        return Err(BootError::Protocol(format!(
            "PMI-2 value of {} bytes (limit {MAX_VALUE_LEN})",
            v.len()
        )));
    }
    Ok(v)
}

impl Backend for Pmi2 {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn local(&self) -> Option<(u32, u32)> {
        self.local
    }

    fn publish(&mut self, entries: &BTreeMap<String, Vec<u8>>) -> Result<(), BootError> {
        for (k, v) in entries {
            let key = head_key(self.rank, k);
            let (head, rest) = split_value(v);
            for (i, chunk) in rest.iter().enumerate() {
                let ck = format!("{key}:{}", i + 1);
                self.call("kvs-put", &[("key", &ck), ("value", chunk)])?;
            }
            // The head last: a reader that finds it finds every chunk.
            self.call("kvs-put", &[("key", &key), ("value", &head)])?;
        }
        Ok(())
    }

    fn fence(&mut self) -> Result<(), BootError> {
        self.sync()
    }

    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, BootError> {
        let hk = head_key(rank, key);
        let Some(head) = self.kvs_get(&hk)? else {
            return Err(BootError::NotFound {
                rank,
                key: key.to_owned(),
            });
        };
        let (n, first) = parse_head(&head)?;
        let mut b64 = first.to_owned();
        for i in 1..n {
            let chunk = self.kvs_get(&format!("{hk}:{i}"))?.ok_or_else(|| {
                BootError::Protocol(format!("PMI-2: chunk {i} of {n} of {hk} is missing"))
            })?;
            b64.push_str(&chunk);
        }
        decode_value(&b64)
    }

    fn barrier(&mut self) -> Result<(), BootError> {
        // PMI-2's only collective is the fence; with nothing new committed it is a barrier.
        self.sync()
    }

    fn finalize(&mut self) -> Result<(), BootError> {
        if self.finalized {
            return Ok(());
        }
        self.finalized = true;
        self.call("finalize", &[]).map(drop)
    }
}

impl Drop for Pmi2 {
    fn drop(&mut self) {
        if self.owns_env {
            IN_USE.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    //! A PMI-2 server in threads, answering the way Slurm's `mpi/pmi2` plugin does
    //! (left-aligned length field, `rc` after `cmd`, no `;` escapes), one thread per
    //! rank over a socketpair, with a job-wide key space and a fence.

    use super::*;
    use std::collections::HashMap;
    use std::io::{Read, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::sync::{Arc, Barrier, Mutex};
    use std::thread;

    use proptest::prelude::*;

    struct Job {
        size: u32,
        /// Puts become visible at the fence, as in Slurm (a temporary store, then merged).
        kvs: Mutex<HashMap<String, String>>,
        fence: Barrier,
        mapping: String,
    }

    fn respond(s: &mut UnixStream, body: &str) {
        let frame = format!("{:<6}{body}", body.len());
        s.write_all(frame.as_bytes()).unwrap();
    }

    fn serve(job: Arc<Job>, mut s: UnixStream, rank: u32) {
        let mut line = [0u8; 64];
        let n = s.read(&mut line).unwrap();
        assert_eq!(&line[..n], wire::INIT_LINE);
        s.write_all(b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n")
            .unwrap();
        let mut pending = Vec::new();
        loop {
            let mut len = [0u8; 6];
            if s.read_exact(&mut len).is_err() {
                return;
            }
            let n: usize = std::str::from_utf8(&len).unwrap().trim().parse().unwrap();
            let mut body = vec![0u8; n];
            s.read_exact(&mut body).unwrap();
            let req = wire::parse(&body).unwrap();
            match req.cmd.as_str() {
                "fullinit" => {
                    assert_eq!(req.get("pmirank"), Some(rank.to_string().as_str()));
                    assert_eq!(req.get("threaded"), Some("FALSE"));
                    respond(&mut s, &format!("cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={rank};size={};appnum=-1;debugged=FALSE;pmiverbose=FALSE;", job.size));
                }
                "info-getjobattr" => {
                    assert_eq!(req.get("key"), Some("PMI_process_mapping"));
                    respond(
                        &mut s,
                        &format!(
                            "cmd=info-getjobattr-response;rc=0;found=TRUE;value={};",
                            job.mapping
                        ),
                    );
                }
                "kvs-put" => {
                    let v = req.get("value").unwrap();
                    assert!(v.len() < 1024, "value of {} bytes", v.len());
                    pending.push((req.get("key").unwrap().to_owned(), v.to_owned()));
                    respond(&mut s, "cmd=kvs-put-response;rc=0;");
                }
                "kvs-fence" => {
                    job.kvs.lock().unwrap().extend(pending.drain(..));
                    job.fence.wait();
                    respond(&mut s, "cmd=kvs-fence-response;rc=0;");
                }
                "kvs-get" => {
                    let v = job
                        .kvs
                        .lock()
                        .unwrap()
                        .get(req.get("key").unwrap())
                        .cloned();
                    match v {
                        Some(v) => respond(
                            &mut s,
                            &format!("cmd=kvs-get-response;rc=0;found=TRUE;value={v};"),
                        ),
                        None => respond(&mut s, "cmd=kvs-get-response;rc=0;found=FALSE;"),
                    }
                }
                "finalize" => {
                    respond(&mut s, "cmd=finalize-response;rc=0;");
                    return;
                }
                other => panic!("unexpected command {other}"),
            }
        }
    }

    fn session(job: &Arc<Job>, rank: u32) -> (Pmi2, thread::JoinHandle<()>) {
        let (a, b) = UnixStream::pair().unwrap();
        let j = job.clone();
        let server = thread::spawn(move || serve(j, b, rank));
        let sock = Socket::from(OwnedFd::from(a));
        let p = Pmi2::start(
            sock,
            rank,
            job.size,
            Some("7.0".into()),
            Duration::from_secs(20),
        )
        .unwrap();
        (p, server)
    }

    #[test]
    fn exchange_against_a_slurm_like_server() {
        let size = 6;
        let job = Arc::new(Job {
            size,
            kvs: Mutex::new(HashMap::new()),
            fence: Barrier::new(size as usize),
            mapping: "(vector,(0,2,3))".into(),
        });
        let ranks: Vec<_> = (0..size)
            .map(|rank| {
                let job = job.clone();
                thread::spawn(move || {
                    let (mut p, server) = session(&job, rank);
                    assert_eq!(p.local(), Some((rank % 3, 3)));
                    // A small value, an empty one, and one that needs many chunks.
                    let big: Vec<u8> = (0..MAX_VALUE_LEN)
                        .map(|i| (i as u32 * 7 + rank) as u8)
                        .collect();
                    let mut e = BTreeMap::new();
                    e.insert("ep".to_string(), format!("name-{rank}").into_bytes());
                    e.insert("empty".to_string(), vec![]);
                    e.insert("big".to_string(), big);
                    p.publish(&e).unwrap();
                    p.fence().unwrap();
                    for peer in 0..size {
                        assert_eq!(
                            p.get(peer, "ep").unwrap(),
                            format!("name-{peer}").into_bytes()
                        );
                        assert_eq!(p.get(peer, "empty").unwrap(), Vec::<u8>::new());
                        let big = p.get(peer, "big").unwrap();
                        assert_eq!(big.len(), MAX_VALUE_LEN);
                        assert!(big
                            .iter()
                            .enumerate()
                            .all(|(i, &b)| b == (i as u32 * 7 + peer) as u8));
                    }
                    assert!(matches!(
                        p.get(0, "nothing"),
                        Err(BootError::NotFound { rank: 0, .. })
                    ));
                    p.barrier().unwrap();
                    p.finalize().unwrap();
                    server.join().unwrap();
                })
            })
            .collect();
        for r in ranks {
            r.join().unwrap();
        }
    }

    #[test]
    fn server_errors_and_silence() {
        // A fence refused by the server is a Remote error carrying its message.
        let (a, mut b) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || {
            let mut line = [0u8; 64];
            let _ = b.read(&mut line).unwrap();
            b.write_all(b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n")
                .unwrap();
            let mut buf = [0u8; 256];
            let _ = b.read(&mut buf).unwrap();
            respond(&mut b, "cmd=fullinit-response;rc=0;rank=0;size=1;");
            let _ = b.read(&mut buf).unwrap();
            respond(&mut b, "cmd=info-getjobattr-response;rc=0;found=FALSE;");
            let _ = b.read(&mut buf).unwrap();
            respond(
                &mut b,
                "cmd=kvs-fence-response;rc=1;errmsg=mpi/pmi2: failed to send temp kvs;",
            );
            // Then silence: the next call must time out, not hang.
            let _ = b.read(&mut buf).unwrap();
            thread::sleep(Duration::from_secs(1));
        });
        let mut p = Pmi2::start(
            Socket::from(OwnedFd::from(a)),
            0,
            1,
            None,
            Duration::from_millis(500),
        )
        .unwrap();
        assert_eq!(p.local(), None);
        let e = p.fence().unwrap_err();
        assert!(
            matches!(&e, BootError::Remote(m) if m.contains("failed to send temp kvs")),
            "{e}"
        );
        let e = p.fence().unwrap_err();
        assert!(
            matches!(
                &e,
                BootError::Timeout {
                    during: "kvs-fence",
                    ..
                }
            ),
            "{e}"
        );
        t.join().unwrap();
    }

    #[test]
    fn wrong_rank_from_server() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let t = thread::spawn(move || {
            let mut line = [0u8; 64];
            let _ = b.read(&mut line).unwrap();
            b.write_all(b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n")
                .unwrap();
            let mut buf = [0u8; 256];
            let _ = b.read(&mut buf).unwrap();
            respond(&mut b, "cmd=fullinit-response;rc=0;rank=1;size=4;");
        });
        let e = Pmi2::start(
            Socket::from(OwnedFd::from(a)),
            2,
            4,
            None,
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert!(
            matches!(&e, BootError::Protocol(m) if m.contains("fullinit")),
            "{e}"
        );
        t.join().unwrap();
    }

    proptest! {
        #[test]
        fn values_split_and_join(v in prop::collection::vec(any::<u8>(), 0..4000)) {
            let (head, rest) = split_value(&v);
            let (n, first) = parse_head(&head).unwrap();
            prop_assert_eq!(n, rest.len() + 1);
            prop_assert!(head.len() < 1024 && rest.iter().all(|c| c.len() <= CHUNK));
            let joined = format!("{first}{}", rest.concat());
            prop_assert_eq!(decode_value(&joined).unwrap(), v);
        }

        #[test]
        fn garbled_heads_are_errors(s in ".{0,64}") {
            if let Ok((n, first)) = parse_head(&s) {
                prop_assert!((1..=MAX_CHUNKS).contains(&n));
                let _ = decode_value(first);
            }
        }
    }
}
