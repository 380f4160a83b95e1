//! The PMI-2 wire protocol: a PMI-1 style `cmd=init` line to agree on version 2, then
//! commands and responses framed by a 6-character decimal length, each a list of
//! `key=value;` pairs whose first key is `cmd` (a `;` inside a value is written `;;`).
//! Responses are parsed defensively: length, character set and structure are checked
//! and every failure is a [`BootError::Protocol`].

use std::io::{self, Read};

use crate::BootError;

/// The largest response accepted: PMI-2 values are at most 1024 bytes, so a response
/// beyond this is not one.
pub(crate) const MAX_RESPONSE: usize = 64 * 1024;

/// The longest init response line accepted.
pub(crate) const MAX_INIT_LINE: usize = 1024;

/// The line that asks the server for PMI-2.
pub(crate) const INIT_LINE: &[u8] = b"cmd=init pmi_version=2 pmi_subversion=0\n";

fn bad(what: impl std::fmt::Display) -> BootError {
    BootError::Protocol(format!("PMI-2: {what}"))
}

/// A parsed response: its command and its other pairs, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resp {
    pub(crate) cmd: String,
    pub(crate) pairs: Vec<(String, String)>,
}

impl Resp {
    /// The first value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Checks that this answers `cmd` and that its `rc` is 0.
    pub(crate) fn expect(self, cmd: &str) -> Result<Resp, BootError> {
        if self.cmd != cmd {
            return Err(bad(format!("expected {cmd}, got {}", self.cmd)));
        }
        match self.get("rc") {
            Some("0") => Ok(self),
            Some(rc) => {
                let msg = self.get("errmsg").unwrap_or("no message");
                Err(BootError::Remote(format!("PMI-2 {cmd}: rc={rc}: {msg}")))
            }
            None => Err(bad(format!("{cmd} without rc"))),
        }
    }
}

/// Encodes a command with its length prefix. Keys and values must not contain `;` or
/// `=` in keys: the callers only pass checked keys and base64 values, and this refuses
/// anything else rather than relying on escapes some servers do not implement.
pub(crate) fn encode(cmd: &str, pairs: &[(&str, &str)]) -> Result<Vec<u8>, BootError> {
    let mut body = format!("cmd={cmd};");
    for (k, v) in pairs {
        if k.is_empty() || k.contains([';', '=']) || v.contains(';') {
            return Err(BootError::Invalid(format!(
                "PMI-2 pair {k:?}={v:?} needs escaping"
            )));
        }
        body.push_str(k);
        body.push('=');
        body.push_str(v);
        body.push(';');
    }
    if body.len() > 999_999 {
        return Err(BootError::Invalid(format!(
            "PMI-2 command of {} bytes",
            body.len()
        )));
    }
    let mut out = format!("{:<6}", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    Ok(out)
}

/// Parses a response body (after its length prefix).
pub(crate) fn parse(body: &[u8]) -> Result<Resp, BootError> {
    let s = std::str::from_utf8(body).map_err(|_| bad("response is not UTF-8"))?;
    let mut pairs = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| bad(format!("pair without '=' in {s:?}")))?;
        let key = &rest[..eq];
        if key.is_empty() || key.contains(';') {
            return Err(bad(format!("bad key {key:?} in {s:?}")));
        }
        rest = &rest[eq + 1..];
        // The value runs to the first ';' that is not doubled; the last pair may omit
        // its terminator.
        let mut value = String::new();
        loop {
            match rest.find(';') {
                None => {
                    value.push_str(rest);
                    rest = "";
                    break;
                }
                Some(i) if rest[i + 1..].starts_with(';') => {
                    value.push_str(&rest[..=i]);
                    rest = &rest[i + 2..];
                }
                Some(i) => {
                    value.push_str(&rest[..i]);
                    rest = &rest[i + 1..];
                    break;
                }
            }
        }
        pairs.push((key.to_owned(), value));
    }
    if pairs.is_empty() || pairs[0].0 != "cmd" {
        return Err(bad(format!("response does not start with cmd=: {s:?}")));
    }
    let cmd = pairs.remove(0).1;
    Ok(Resp { cmd, pairs })
}

/// Parses a 6-character length field: decimal digits, padded with spaces on either
/// side (servers differ), at most [`MAX_RESPONSE`].
pub(crate) fn parse_len(field: &[u8; 6]) -> Result<usize, BootError> {
    let s = std::str::from_utf8(field).map_err(|_| bad("length field is not text"))?;
    let t = s.trim_matches(' ');
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(format!("length field {s:?}")));
    }
    let n: usize = t.parse().map_err(|_| bad(format!("length field {s:?}")))?;
    if n > MAX_RESPONSE {
        return Err(bad(format!("response of {n} bytes (limit {MAX_RESPONSE})")));
    }
    Ok(n)
}

/// Reads one framed response.
pub(crate) fn read_resp(r: &mut impl Read) -> Result<Resp, BootError> {
    let mut field = [0u8; 6];
    r.read_exact(&mut field).map_err(read_err)?;
    let n = parse_len(&field)?;
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).map_err(read_err)?;
    parse(&body)
}

fn read_err(e: io::Error) -> BootError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => BootError::Timeout {
            during: "waiting for the PMI-2 server",
            after: Default::default(),
            missing: vec![],
        },
        io::ErrorKind::UnexpectedEof => {
            BootError::Remote("the PMI-2 server closed the connection".into())
        }
        _ => BootError::io("reading from the PMI-2 server", e),
    }
}

/// Reads the init response line, at most [`MAX_INIT_LINE`] bytes, one byte at a time
/// so that nothing after the newline is consumed.
pub(crate) fn read_init_line(r: &mut impl Read) -> Result<String, BootError> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    loop {
        r.read_exact(&mut b).map_err(read_err)?;
        if b[0] == b'\n' {
            break;
        }
        if line.len() == MAX_INIT_LINE {
            return Err(bad("init response line too long"));
        }
        line.push(b[0]);
    }
    String::from_utf8(line).map_err(|_| bad("init response is not UTF-8"))
}

/// Checks the init response: `cmd=response_to_init`, `rc=0`, version 2.
pub(crate) fn check_init(line: &str) -> Result<(), BootError> {
    let mut cmd = None;
    let mut rc = None;
    let mut version = None;
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        let (k, v) = word
            .split_once('=')
            .ok_or_else(|| bad(format!("init response {line:?}")))?;
        match k {
            "cmd" => cmd = Some(v),
            "rc" => rc = Some(v),
            "pmi_version" => version = Some(v),
            _ => {}
        }
    }
    if cmd != Some("response_to_init") {
        return Err(bad(format!("init response {line:?}")));
    }
    if rc.is_some_and(|rc| rc != "0") {
        return Err(BootError::Remote(format!(
            "the PMI server refused PMI-2: {line:?}"
        )));
    }
    if version != Some("2") {
        return Err(BootError::Remote(format!(
            "the PMI server does not speak PMI-2: {line:?}"
        )));
    }
    Ok(())
}

/// Finds `rank`'s place on its node in a `PMI_process_mapping` value such as
/// `(vector,(0,2,4),(2,1,3))`: blocks of (first node, node count, ranks per node),
/// assigning consecutive ranks node by node. Returns (local rank, local size).
pub(crate) fn local_from_mapping(
    mapping: &str,
    rank: u32,
    size: u32,
) -> Result<(u32, u32), BootError> {
    let m = mapping.trim();
    let inner = m
        .strip_prefix("(vector")
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| bad(format!("process mapping {m:?}")))?;
    let mut blocks = Vec::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let r = rest
            .strip_prefix(",(")
            .ok_or_else(|| bad(format!("process mapping {m:?}")))?;
        let end = r
            .find(')')
            .ok_or_else(|| bad(format!("process mapping {m:?}")))?;
        let nums: Vec<u64> = r[..end]
            .split(',')
            .map(|n| n.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad(format!("process mapping {m:?}")))?;
        let [start, count, per] = nums[..] else {
            return Err(bad(format!("process mapping {m:?}")));
        };
        blocks.push((start, count, per));
        rest = &r[end + 1..];
    }
    // Walk the assignment, counting each node's ranks. As in MPICH, a mapping that
    // places fewer ranks than the job has repeats from its start (hydra says
    // `(vector,(0,1,1))` for any number of ranks on one node).
    let per_pass = blocks
        .iter()
        .try_fold(0u64, |acc, &(_, count, per)| {
            count.checked_mul(per).and_then(|n| acc.checked_add(n))
        })
        .ok_or_else(|| bad(format!("process mapping {m:?} overflows")))?;
    if per_pass == 0 || blocks.iter().any(|&(_, _, per)| per == 0) {
        return Err(bad(format!("process mapping {m:?} has an empty block")));
    }
    let mut per_node: std::collections::HashMap<u64, u32> = Default::default();
    let mut mine = None;
    let mut next: u64 = 0;
    'walk: loop {
        for &(start, count, per) in &blocks {
            for node in 0..count {
                let node = start
                    .checked_add(node)
                    .ok_or_else(|| bad(format!("process mapping {m:?}")))?;
                for _ in 0..per {
                    if next >= u64::from(size) {
                        break 'walk;
                    }
                    let n = per_node.entry(node).or_insert(0);
                    if next == u64::from(rank) {
                        mine = Some((node, *n));
                    }
                    *n += 1;
                    next += 1;
                }
            }
        }
    }
    let (node, local_rank) = mine.ok_or_else(|| bad("rank not in the process mapping"))?;
    Ok((local_rank, per_node[&node]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn slurm_responses() {
        let r = parse(b"cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=3;size=8;appnum=-1;debugged=FALSE;pmiverbose=FALSE;").unwrap();
        assert_eq!(r.cmd, "fullinit-response");
        assert_eq!(r.get("rank"), Some("3"));
        assert_eq!(r.get("size"), Some("8"));
        let r = parse(b"cmd=kvs-get-response;rc=0;found=TRUE;value=ab-_9;").unwrap();
        assert_eq!(r.get("value"), Some("ab-_9"));
        let e = parse(b"cmd=kvs-fence-response;rc=1;errmsg=failed to send temp kvs;")
            .unwrap()
            .expect("kvs-fence-response")
            .unwrap_err();
        assert!(e.to_string().contains("failed to send temp kvs"), "{e}");
        assert_eq!(parse(b"cmd=x;v=a;;b;").unwrap().get("v"), Some("a;b"));
        assert!(check_init("cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0").is_ok());
        assert!(check_init("cmd=response_to_init rc=1 pmi_version=1 pmi_subversion=1").is_err());
    }

    #[test]
    fn encoding() {
        let f = encode("kvs-put", &[("key", "fb0:ep"), ("value", "1:QUJD")]).unwrap();
        assert_eq!(f, b"36    cmd=kvs-put;key=fb0:ep;value=1:QUJD;".to_vec());
        assert_eq!(parse_len(b"34    ").unwrap(), 34);
        assert_eq!(parse_len(b"    34").unwrap(), 34);
        assert!(encode("kvs-put", &[("key", "a;b")]).is_err());
    }

    #[test]
    fn mappings() {
        // Two nodes of four ranks, blocked.
        let m = "(vector,(0,2,4))";
        assert_eq!(local_from_mapping(m, 0, 8).unwrap(), (0, 4));
        assert_eq!(local_from_mapping(m, 5, 8).unwrap(), (1, 4));
        // Cyclic over two nodes: ranks alternate.
        let m = "(vector,(0,2,1),(0,2,1),(0,2,1))";
        assert_eq!(local_from_mapping(m, 3, 6).unwrap(), (1, 3));
        assert_eq!(local_from_mapping(m, 4, 6).unwrap(), (2, 3));
        // Uneven: node 2 has three ranks.
        let m = "(vector,(0,2,2),(2,1,3))";
        assert_eq!(local_from_mapping(m, 6, 7).unwrap(), (2, 3));
        // Shorter than the job: repeated, as hydra's one-node mapping needs.
        assert_eq!(
            local_from_mapping("(vector,(0,1,1))", 5, 8).unwrap(),
            (5, 8)
        );
        assert_eq!(
            local_from_mapping("(vector,(0,2,1))", 3, 5).unwrap(),
            (1, 2)
        );
        assert!(local_from_mapping("(vector,(0,0,2))", 0, 4).is_err());
        assert!(local_from_mapping("(vector,(0,1,0))", 0, 1).is_err());
        assert!(local_from_mapping("", 0, 1).is_err());
    }

    proptest! {
        #[test]
        fn garbled_responses_are_errors(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(r) = parse(&bytes) {
                // Anything accepted has the structure the callers rely on.
                prop_assert!(bytes.starts_with(b"cmd="), "accepted {:?} as {:?}", bytes, r);
                prop_assert!(bytes.starts_with(b"cmd="));
            }
            let mut field = [b' '; 6];
            for (f, b) in field.iter_mut().zip(bytes.iter()) {
                *f = *b;
            }
            if let Ok(n) = parse_len(&field) {
                prop_assert!(n <= MAX_RESPONSE);
            }
            let _ = check_init(&String::from_utf8_lossy(&bytes));
            let _ = read_resp(&mut &bytes[..]);
            let _ = read_init_line(&mut &bytes[..]);
        }

        #[test]
        fn textual_garbage_in_mappings(s in "\\(vector(,\\([0-9,]{0,12}\\)){0,4}\\)", rank in 0u32..16, size in 1u32..16) {
            if let Ok((lr, ls)) = local_from_mapping(&s, rank.min(size - 1), size) {
                prop_assert!(lr < ls && ls <= size);
            }
        }

        #[test]
        fn responses_roundtrip(cmd in "[a-z-]{1,16}", pairs in prop::collection::vec(("[a-z-]{1,12}", "[A-Za-z0-9_:-]{0,40}"), 0..8)) {
            let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let frame = encode(&cmd, &refs).unwrap();
            let r = read_resp(&mut &frame[..]).unwrap();
            prop_assert_eq!(r.cmd, cmd);
            prop_assert_eq!(r.pairs, pairs);
        }

        #[test]
        fn truncated_frames_are_errors(cmd in "[a-z-]{1,16}", v in "[A-Za-z0-9]{0,40}", cut in any::<prop::sample::Index>()) {
            let frame = encode(&cmd, &[("value", &v)]).unwrap();
            let n = cut.index(frame.len());
            prop_assert!(read_resp(&mut &frame[..n]).is_err());
        }
    }
}
