//! The launcher-less fallback: rank 0 serves the exchange over TCP at
//! `FABRIC_BOOT_ADDR`, the other ranks connect to it.
//!
//! Collectives run through rank 0: each client sends its committed values with its
//! `Sync`, rank 0 waits (up to the timeout) for every rank, then sends everyone the
//! round's values, so `get` never leaves the process. Rank 0 reads each client on a
//! thread of its own that forwards frames to one channel: a rank that dies is seen at
//! once (its socket closes), and a rank that hangs is named when the timeout expires.

mod wire;

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use wire::{read_frame, write_frame, Entry, Msg};

use crate::{check_rank_size, env_u32, Backend, BootError};

/// How much longer a client waits than the server, so that the server's verdict (which
/// names the missing ranks) reaches it before its own timeout fires.
const CLIENT_GRACE: Duration = Duration::from_secs(5);

/// How often rank 0 looks for new connections while ranks are joining.
const ACCEPT_POLL: Duration = Duration::from_millis(5);

/// How often a client retries a refused connection while rank 0 starts.
const CONNECT_RETRY: Duration = Duration::from_millis(20);

pub(crate) struct Tcp {
    rank: u32,
    size: u32,
    local: (u32, u32),
    timeout: Duration,
    role: Role,
    /// Values committed since the last collective, sent with the next fence.
    outgoing: BTreeMap<String, Vec<u8>>,
    /// Every value exchanged so far, by (rank, key).
    seen: BTreeMap<(u32, String), Vec<u8>>,
    /// Set once a collective failed: the ranks no longer agree on where they are.
    broken: Option<String>,
}

enum Role {
    Server(Server),
    Client(TcpStream),
}

/// What a client's reader thread reports.
enum Event {
    Frame(usize, Msg),
    /// The connection ended (closed, reset, or failed).
    Gone(usize),
    /// The connection sent something that is not a message.
    Garbled(usize, String),
}

struct Server {
    /// A write handle per rank (index 0 unused), shared with that rank's reader thread.
    peers: Vec<Option<TcpStream>>,
    /// Connection id to rank, once the connection's Hello is accepted.
    ranks: Vec<Option<u32>>,
    events: Receiver<Event>,
}

/// A name for this machine's kernel: ranks that share it are on one node.
fn node_id() -> Vec<u8> {
    match std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        Ok(s) if !s.trim().is_empty() => format!("boot:{}", s.trim()).into_bytes(),
        _ => {
            let u = rustix::system::uname();
            let mut v = b"host:".to_vec();
            v.extend_from_slice(u.nodename().to_bytes());
            v
        }
    }
}

fn resolve(addr: &str) -> Result<SocketAddr, BootError> {
    addr.to_socket_addrs()
        .map_err(|e| BootError::Env {
            var: "FABRIC_BOOT_ADDR",
            reason: format!("{addr:?} does not resolve: {e}"),
        })?
        .next()
        .ok_or_else(|| BootError::Env {
            var: "FABRIC_BOOT_ADDR",
            reason: format!("{addr:?} resolves to no address"),
        })
}

fn send(stream: &mut TcpStream, msg: &Msg, timeout: Duration) -> Result<(), BootError> {
    let frame = msg.encode()?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| BootError::io("setting a write timeout", e))?;
    write_frame(stream, &frame).map_err(|e| BootError::io("sending to the exchange", e))
}

fn left(deadline: Instant) -> Option<Duration> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
}

impl Tcp {
    pub(crate) fn from_env(timeout: Duration) -> Result<Tcp, BootError> {
        let addr = std::env::var("FABRIC_BOOT_ADDR").map_err(|_| BootError::Env {
            var: "FABRIC_BOOT_ADDR",
            reason: "not set (or not UTF-8)".into(),
        })?;
        let rank = env_u32("FABRIC_BOOT_RANK")?;
        let size = env_u32("FABRIC_BOOT_SIZE")?;
        check_rank_size(rank, size, "FABRIC_BOOT_RANK/FABRIC_BOOT_SIZE")?;
        let addr = resolve(&addr)?;
        if rank == 0 {
            Tcp::serve(addr, size, timeout)
        } else {
            Tcp::join(addr, rank, size, timeout)
        }
    }

    fn new(rank: u32, size: u32, local: (u32, u32), timeout: Duration, role: Role) -> Tcp {
        Tcp {
            rank,
            size,
            local,
            timeout,
            role,
            outgoing: BTreeMap::new(),
            seen: BTreeMap::new(),
            broken: None,
        }
    }

    fn serve(addr: SocketAddr, size: u32, timeout: Duration) -> Result<Tcp, BootError> {
        let deadline = Instant::now() + timeout;
        let listener = TcpListener::bind(addr).map_err(|e| BootError::Io {
            during: "rank 0 binding FABRIC_BOOT_ADDR",
            source: e,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| BootError::io("listening", e))?;
        let (tx, events) = mpsc::channel();
        let mut server = Server {
            peers: (0..size).map(|_| None).collect(),
            ranks: Vec::new(),
            events,
        };
        let mut conns: Vec<Option<TcpStream>> = Vec::new();
        let mut nodes: Vec<Option<Vec<u8>>> = (0..size).map(|_| None).collect();
        nodes[0] = Some(node_id());
        let mut joined = 1;
        while joined < size {
            loop {
                match listener.accept() {
                    Ok((s, _)) => {
                        let id = conns.len();
                        let reader = s.try_clone().map_err(|e| BootError::io("accepting", e))?;
                        s.set_nodelay(true)
                            .map_err(|e| BootError::io("accepting", e))?;
                        conns.push(Some(s));
                        server.ranks.push(None);
                        spawn_reader(id, reader, tx.clone());
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    // A connection that failed before it was accepted is its own client's
                    // problem; the rank will retry or time out.
                    Err(e) if e.kind() == ErrorKind::ConnectionAborted => {}
                    Err(e) => return Err(BootError::io("accepting ranks", e)),
                }
            }
            let Some(wait) = left(deadline) else {
                let missing: Vec<u32> =
                    (0..size).filter(|&r| nodes[r as usize].is_none()).collect();
                let err = BootError::Timeout {
                    during: "init (ranks joining rank 0)",
                    after: timeout,
                    missing,
                };
                server.fail_all(&err, timeout);
                return Err(err);
            };
            match server.events.recv_timeout(wait.min(ACCEPT_POLL)) {
                Ok(Event::Frame(
                    id,
                    Msg::Hello {
                        rank,
                        size: s,
                        node,
                    },
                )) if server.ranks[id].is_none() => {
                    let verdict = if s != size {
                        Err(format!(
                            "rank {rank} says the job has {s} ranks, rank 0 says {size}"
                        ))
                    } else if rank == 0 || rank >= size {
                        Err(format!("rank {rank} is out of range for a job of {size}"))
                    } else if nodes[rank as usize].is_some() {
                        Err(format!("rank {rank} joined twice"))
                    } else {
                        Ok(())
                    };
                    let Some(mut conn) = conns[id].take() else {
                        continue;
                    };
                    match verdict {
                        Ok(()) => {
                            nodes[rank as usize] = Some(node);
                            server.ranks[id] = Some(rank);
                            server.peers[rank as usize] = Some(conn);
                            joined += 1;
                        }
                        Err(text) => {
                            // Refuse this connection; the job may still complete.
                            let _ = send(&mut conn, &Msg::Fail { text }, timeout);
                            let _ = conn.shutdown(Shutdown::Both);
                        }
                    }
                }
                Ok(Event::Frame(id, _) | Event::Gone(id) | Event::Garbled(id, _)) => {
                    if let Some(rank) = server.ranks[id] {
                        // Clients send nothing after their Hello until init is over.
                        let err = BootError::PeerGone {
                            during: "init",
                            ranks: vec![rank],
                        };
                        server.fail_all(&err, timeout);
                        return Err(err);
                    }
                    // Not a rank yet: a stray connection, dropped.
                    if let Some(c) = conns[id].take() {
                        let _ = c.shutdown(Shutdown::Both);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => unreachable!("the server holds a sender"),
            }
        }
        drop(listener);
        for c in conns.into_iter().flatten() {
            let _ = c.shutdown(Shutdown::Both);
        }
        let nodes: Vec<Vec<u8>> = nodes.into_iter().map(|n| n.expect("all joined")).collect();
        let local_of = |r: usize| {
            let same: Vec<usize> = (0..nodes.len()).filter(|&o| nodes[o] == nodes[r]).collect();
            let lr = same.iter().position(|&o| o == r).expect("r is on its node");
            (lr as u32, same.len() as u32)
        };
        for r in 1..size as usize {
            let (local_rank, local_size) = local_of(r);
            let msg = Msg::Ready {
                local_rank,
                local_size,
            };
            let peer = server.peers[r].as_mut().expect("joined");
            if send(peer, &msg, timeout).is_err() {
                let err = BootError::PeerGone {
                    during: "init",
                    ranks: vec![r as u32],
                };
                server.fail_all(&err, timeout);
                return Err(err);
            }
        }
        Ok(Tcp::new(
            0,
            size,
            local_of(0),
            timeout,
            Role::Server(server),
        ))
    }

    fn join(addr: SocketAddr, rank: u32, size: u32, timeout: Duration) -> Result<Tcp, BootError> {
        let deadline = Instant::now() + timeout;
        let mut stream = loop {
            let Some(wait) = left(deadline) else {
                return Err(BootError::Timeout {
                    during: "init (connecting to rank 0 at FABRIC_BOOT_ADDR)",
                    after: timeout,
                    missing: vec![0],
                });
            };
            match TcpStream::connect_timeout(&addr, wait) {
                Ok(s) => break s,
                // Rank 0 has not bound its address yet.
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::ConnectionRefused | ErrorKind::Interrupted
                    ) =>
                {
                    thread::sleep(CONNECT_RETRY.min(wait));
                }
                Err(e) if e.kind() == ErrorKind::TimedOut => {}
                Err(e) => return Err(BootError::io("connecting to rank 0 at FABRIC_BOOT_ADDR", e)),
            }
        };
        stream
            .set_nodelay(true)
            .map_err(|e| BootError::io("connecting to rank 0", e))?;
        let hello = Msg::Hello {
            rank,
            size,
            node: node_id(),
        };
        send(&mut stream, &hello, timeout)?;
        match recv(&mut stream, timeout + CLIENT_GRACE, "init")? {
            Msg::Ready {
                local_rank,
                local_size,
            } if local_rank < local_size && local_size <= size => Ok(Tcp::new(
                rank,
                size,
                (local_rank, local_size),
                timeout,
                Role::Client(stream),
            )),
            other => Err(unexpected(other, "init")),
        }
    }

    fn collective(&mut self, data: bool) -> Result<(), BootError> {
        if let Some(why) = &self.broken {
            return Err(BootError::Invalid(format!(
                "an earlier collective failed ({why}); the session cannot continue"
            )));
        }
        let during = if data { "fence" } else { "barrier" };
        let entries: Vec<Entry> = std::mem::take(&mut self.outgoing).into_iter().collect();
        let result = match &mut self.role {
            Role::Server(s) => s.round(self.size, data, entries, self.timeout, during),
            Role::Client(stream) => {
                let sync = Msg::Sync { data, entries };
                send(stream, &sync, self.timeout).and_then(|()| {
                    match recv(stream, self.timeout + CLIENT_GRACE, during)? {
                        Msg::Done { entries } => Ok(entries),
                        other => Err(unexpected(other, during)),
                    }
                })
            }
        };
        match result {
            Ok(entries) => {
                for (r, k, v) in entries {
                    if r >= self.size {
                        return Err(BootError::Protocol(format!(
                            "{during}: a value from rank {r} in a job of {}",
                            self.size
                        )));
                    }
                    self.seen.insert((r, k), v);
                }
                Ok(())
            }
            Err(e) => {
                self.broken = Some(e.to_string());
                Err(e)
            }
        }
    }
}

/// Reads one message, waiting at most `wait`.
fn recv(stream: &mut TcpStream, wait: Duration, during: &'static str) -> Result<Msg, BootError> {
    stream
        .set_read_timeout(Some(wait))
        .map_err(|e| BootError::io("setting a read timeout", e))?;
    match read_frame(stream) {
        Ok(Some(p)) => Msg::decode(&p),
        Ok(None) => Err(BootError::PeerGone {
            during,
            ranks: vec![0],
        }),
        // Rank 0 answers within the timeout, naming whoever is missing; past that and
        // the grace, rank 0 itself is what is missing.
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Err(BootError::Timeout {
                during,
                after: wait,
                missing: vec![0],
            })
        }
        Err(e) if e.kind() == ErrorKind::InvalidData => Err(BootError::Protocol(e.to_string())),
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
            ) =>
        {
            Err(BootError::PeerGone {
                during,
                ranks: vec![0],
            })
        }
        Err(e) => Err(BootError::io(during, e)),
    }
}

fn unexpected(msg: Msg, during: &'static str) -> BootError {
    match msg {
        Msg::Fail { text } => BootError::Remote(text),
        other => BootError::Protocol(format!(
            "{during}: unexpected message from rank 0: {other:?}"
        )),
    }
}

fn spawn_reader(id: usize, mut stream: TcpStream, tx: Sender<Event>) {
    thread::spawn(move || loop {
        let event = match read_frame(&mut stream) {
            Ok(Some(p)) => match Msg::decode(&p) {
                Ok(m) => Event::Frame(id, m),
                Err(e) => Event::Garbled(id, e.to_string()),
            },
            Err(e) if e.kind() == ErrorKind::InvalidData => Event::Garbled(id, e.to_string()),
            Ok(None) | Err(_) => Event::Gone(id),
        };
        let last = !matches!(event, Event::Frame(..));
        if tx.send(event).is_err() || last {
            return;
        }
    });
}

impl Server {
    /// One collective round: every client's Sync, then everyone's values to everyone.
    fn round(
        &mut self,
        size: u32,
        data: bool,
        own: Vec<Entry>,
        timeout: Duration,
        during: &'static str,
    ) -> Result<Vec<(u32, String, Vec<u8>)>, BootError> {
        let deadline = Instant::now() + timeout;
        let mut got: Vec<Option<Vec<Entry>>> = (0..size).map(|_| None).collect();
        got[0] = Some(own);
        let mut arrived = 1;
        while arrived < size {
            let Some(wait) = left(deadline) else {
                let missing = (0..size).filter(|&r| got[r as usize].is_none()).collect();
                let err = BootError::Timeout {
                    during,
                    after: timeout,
                    missing,
                };
                self.fail_all(&err, timeout);
                return Err(err);
            };
            let event = match self.events.recv_timeout(wait) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => unreachable!("the server holds a sender"),
            };
            let (id, verdict) = match event {
                Event::Frame(id, Msg::Sync { data: d, entries }) if d == data => (id, Ok(entries)),
                Event::Frame(id, Msg::Sync { .. }) => (
                    id,
                    Err(Some(
                        "entered a barrier while others entered a fence, or the reverse"
                            .to_string(),
                    )),
                ),
                Event::Frame(id, other) => {
                    (id, Err(Some(format!("sent {other:?} during a collective"))))
                }
                Event::Garbled(id, why) => (id, Err(Some(why))),
                Event::Gone(id) => (id, Err(None)),
            };
            let Some(rank) = self.ranks.get(id).copied().flatten() else {
                // A connection refused during init; its reader's last words.
                continue;
            };
            match verdict {
                Ok(entries) if got[rank as usize].is_none() => {
                    got[rank as usize] = Some(entries);
                    arrived += 1;
                }
                Ok(_) => {
                    let err = BootError::Protocol(format!("{during}: rank {rank} synced twice"));
                    self.fail_all(&err, timeout);
                    return Err(err);
                }
                Err(why) => {
                    let err = match why {
                        None => BootError::PeerGone {
                            during,
                            ranks: vec![rank],
                        },
                        Some(why) => BootError::Protocol(format!("{during}: rank {rank}: {why}")),
                    };
                    self.fail_all(&err, timeout);
                    return Err(err);
                }
            }
        }
        let all: Vec<(u32, String, Vec<u8>)> = got
            .into_iter()
            .enumerate()
            .flat_map(|(r, e)| {
                e.expect("all arrived")
                    .into_iter()
                    .map(move |(k, v)| (r as u32, k, v))
            })
            .collect();
        let done = Msg::Done { entries: all };
        let frame = match done.encode() {
            Ok(f) => f,
            Err(e) => {
                self.fail_all(&e, timeout);
                return Err(e);
            }
        };
        let mut gone = Vec::new();
        for r in 1..size as usize {
            let peer = self.peers[r].as_mut().expect("joined");
            let sent = peer
                .set_write_timeout(Some(timeout))
                .and_then(|()| write_frame(peer, &frame));
            if sent.is_err() {
                gone.push(r as u32);
            }
        }
        if !gone.is_empty() {
            let err = BootError::PeerGone {
                during,
                ranks: gone,
            };
            self.fail_all(&err, timeout);
            return Err(err);
        }
        let Msg::Done { entries } = done else {
            unreachable!("built above")
        };
        Ok(entries)
    }

    /// Tells every client still connected why the job cannot go on.
    fn fail_all(&mut self, err: &BootError, timeout: Duration) {
        let msg = Msg::Fail {
            text: err.to_string(),
        };
        for peer in self.peers.iter_mut().flatten() {
            // A client that cannot be told has gone too; nothing more to do for it.
            let _ = send(peer, &msg, timeout.min(Duration::from_secs(1)));
        }
    }

    fn close(&mut self) {
        for peer in self.peers.iter_mut() {
            if let Some(p) = peer.take() {
                let _ = p.shutdown(Shutdown::Both);
            }
        }
    }
}

impl Backend for Tcp {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn local(&self) -> Option<(u32, u32)> {
        Some(self.local)
    }

    fn publish(&mut self, entries: &BTreeMap<String, Vec<u8>>) -> Result<(), BootError> {
        for (k, v) in entries {
            self.outgoing.insert(k.clone(), v.clone());
        }
        Ok(())
    }

    fn fence(&mut self) -> Result<(), BootError> {
        self.collective(true)
    }

    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, BootError> {
        self.seen
            .get(&(rank, key.to_owned()))
            .cloned()
            .ok_or_else(|| BootError::NotFound {
                rank,
                key: key.to_owned(),
            })
    }

    fn barrier(&mut self) -> Result<(), BootError> {
        self.collective(false)
    }

    fn finalize(&mut self) -> Result<(), BootError> {
        match &mut self.role {
            Role::Server(s) => s.close(),
            Role::Client(stream) => {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.close();
    }
}
