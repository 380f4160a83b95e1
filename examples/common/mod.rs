//! What the `fi_*`-style tools (`pingpong`, `rdm_tagged_bw`, `rma_bw`) share: errors and
//! exit codes, the provider choice, the out-of-band control connection, the roles a run
//! takes (server, client, self-spawned two-process pair, in-process threads), busy
//! completion waits that notice a vanished peer, and `fabtests`' number formatting.
//!
//! Roles, from the command line (see [`PeerArgs`]):
//!
//! * `<srv_addr>`: client; connects to the server's control port (`-P`, default 47592).
//! * `--server` or `-B port`: server; listens on the control port (default 47592).
//! * neither: a complete run. With a provider that crosses processes (shm) the tool
//!   starts itself as the server child on a free port and runs as the client, so the
//!   two sides are two processes; with loopback (or `--threads`) both sides run in this
//!   process on two threads.
//!
//! Either way the two sides exchange their endpoint names (`fi_getname`, opaque bytes)
//! over the control connection and insert the peer's into the AV. A child never
//! outlives its parent: the parent kills it on every error path ([`ChildServer`]'s
//! drop), the child gives up waiting for the client when the parent is gone, and once
//! connected each side notices within about 10 ms that the control connection closed
//! (a peer that died) while it busy-polls a CQ ([`Watch`]). A client also gives up
//! when no completion arrives for `-T` seconds (default 10), so a stuck run fails with
//! `FI_ETIMEDOUT` instead of hanging.

use std::cell::Cell;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_hybrid::ShmTcp;
use fabric_loopback::Loopback;
use fabric_shm::Shm;
use fabric_tcp::Tcp;

/// `fi_pingpong`'s (and `fabtests`') default control port.
pub const DEFAULT_CTRL_PORT: u16 = 47592;
/// The default sizes of a run without `-S` (`fabtests`' `FT_DEFAULT_SIZE` set).
pub const DEFAULT_SIZES: [usize; 6] = [64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20];
/// How often a busy wait looks at the control connection and the parent process.
const WATCH_PERIOD: Duration = Duration::from_millis(10);
/// Empty CQ polls in a row before a look at the clock (and a `sched_yield`), and
/// between two such looks while the wait goes on. Counted from the last completion, so
/// the short waits of a steady exchange (a few polls each) make no system call.
const POLLS_PER_CHECK: u32 = 1024;
/// How long a spawned server waits for its parent to connect.
const SPAWNED_ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client retries a refused connection (the server may still be starting).
const CONNECT_RETRY: Duration = Duration::from_secs(5);
/// How long the parent waits for the server child to exit after a run.
const CHILD_EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the parent lets the server child exit by itself after a failed run.
const CHILD_EXIT_GRACE: Duration = Duration::from_millis(200);
/// The line a spawned server prints on stdout once it listens.
const PORT_LINE: &str = "listening on port ";

/// A failure: message for stderr, and the `FI_E*` code that becomes the exit status.
#[derive(Debug, PartialEq, Eq)]
pub struct Failure {
    /// Positive `FI_E*` / errno value.
    pub code: i32,
    /// What went wrong, printed to stderr.
    pub msg: String,
}

impl Failure {
    /// A failure with `err`'s code.
    pub fn new(err: Error, msg: impl Into<String>) -> Self {
        Failure {
            code: err.code(),
            msg: msg.into(),
        }
    }

    /// A failed call, printed like `fabtests`' `FT_PRINTERR`.
    pub fn call(call: &str, err: Error) -> Self {
        Failure::new(
            err,
            format!("{call}(): ret=-{} ({})", err.code(), err.as_str()),
        )
    }

    /// Bad command-line input (`EINVAL`).
    pub fn usage(msg: impl Into<String>) -> Self {
        Failure::new(Error::Inval, msg)
    }

    /// The process exit status for this failure (never 0).
    pub fn exit_code(&self) -> u8 {
        u8::try_from(self.code & 0xff).unwrap_or(1).max(1)
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        let msg = format!("control connection: {e}");
        Failure::new(Error::from(e), msg)
    }
}

/// A tool result.
pub type Res<T> = std::result::Result<T, Failure>;

/// Adds the failing call's name to a library error.
pub trait Call<T> {
    /// `Err(e)` becomes `Failure::call(name, e)`.
    fn call(self, name: &str) -> Res<T>;
}

impl<T> Call<T> for fabric::Result<T> {
    fn call(self, name: &str) -> Res<T> {
        self.map_err(|e| Failure::call(name, e))
    }
}

/// The providers the tools are built with; `-p` picks one at run time and the tool runs
/// on that provider's static stack (`Stack<P>`: `FI_THREAD_DOMAIN`, manual progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prov {
    /// Shared memory between processes (and threads) of one host.
    Shm,
    /// In-process delivery only.
    Loopback,
    /// TCP sockets, between hosts (`FABRIC_TCP_IFACE` chooses the interface).
    Tcp,
    /// Shared memory to peers on this node, TCP to the others (`fabric_hybrid::ShmTcp`).
    Hybrid,
}

impl Prov {
    /// `-p`: a provider name. Unknown names fail as `fi_getinfo` does (`FI_ENODATA`).
    pub fn parse(s: &str) -> Res<Prov> {
        match s.to_ascii_lowercase().as_str() {
            "shm" => Ok(Prov::Shm),
            "loopback" => Ok(Prov::Loopback),
            "tcp" => Ok(Prov::Tcp),
            "hybrid" => Ok(Prov::Hybrid),
            _ => Err(Failure::call("fi_getinfo", Error::NoData)),
        }
    }

    /// The provider's name (`fi_info -p`).
    pub fn name(self) -> &'static str {
        match self {
            Prov::Shm => Shm::NAME,
            Prov::Loopback => Loopback::NAME,
            Prov::Tcp => Tcp::NAME,
            Prov::Hybrid => ShmTcp::NAME,
        }
    }

    /// Whether the two sides can be two processes.
    pub fn crosses_processes(self) -> bool {
        matches!(self, Prov::Shm | Prov::Tcp | Prov::Hybrid)
    }
}

/// The command-line options every tool shares: provider and roles.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct PeerArgs {
    /// provider: shm|loopback|tcp|hybrid
    #[arg(short = 'p', value_name = "provider", default_value = "shm")]
    pub provider: String,
    /// source control port: run as server listening there (0: any free port)
    #[arg(short = 'B', value_name = "src_port")]
    pub src_port: Option<u16>,
    /// destination control port of <srv_addr> (default 47592)
    #[arg(short = 'P', value_name = "dst_port")]
    pub dst_port: Option<u16>,
    /// run as server on the control port (-B, default 47592) and wait for a client
    #[arg(long = "server")]
    pub server: bool,
    /// run both sides in this process, on two threads
    #[arg(long = "threads")]
    pub threads: bool,
    /// use IPv6 for the TCP control connection
    #[arg(short = '6')]
    pub ipv6: bool,
    /// client: fail when no completion arrives for this many seconds (0: wait forever)
    #[arg(short = 'T', value_name = "seconds", default_value_t = 10)]
    pub timeout: u64,
    /// started by a parent run: report the port on stdout, exit with the parent
    #[arg(long = "spawned", hide = true)]
    pub spawned: bool,
    /// server address: run as client
    pub srv_addr: Option<String>,
}

/// How the two sides talk out of band when both run in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrlSpec {
    /// A connected socket pair.
    InMemory,
    /// TCP on localhost: the server side listens on `listen` (0: any free port), the
    /// client side connects to `connect` (`None`: wherever the server listens).
    Tcp {
        /// Listening port.
        listen: u16,
        /// Port to connect to.
        connect: Option<u16>,
        /// IPv6 localhost instead of IPv4.
        ipv6: bool,
    },
}

/// What this process does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Both sides here, on two threads.
    Threads(CtrlSpec),
    /// The server side: listen on `port`, serve one client.
    Server {
        /// Control port (0: any free port).
        port: u16,
        /// IPv6 instead of IPv4.
        ipv6: bool,
        /// Started by a parent run (see [`PeerArgs::spawned`]).
        spawned: bool,
    },
    /// The client side: connect to `host:port`.
    Client {
        /// Server host.
        host: String,
        /// Server control port.
        port: u16,
    },
    /// Start the server as a child process, then run the client side.
    Pair {
        /// IPv6 instead of IPv4.
        ipv6: bool,
    },
}

impl PeerArgs {
    /// `-T`: how long a client waits for a completion before it gives up.
    pub fn timeout(&self) -> Option<Duration> {
        (self.timeout > 0).then(|| Duration::from_secs(self.timeout))
    }

    /// The provider and role these options ask for.
    pub fn role(&self) -> Res<(Prov, Role)> {
        let prov = Prov::parse(&self.provider)?;
        let server = self.server || self.src_port.is_some();
        if !prov.crosses_processes() || self.threads {
            if let Some(addr) = &self.srv_addr {
                return Err(Failure::new(
                    Error::NotSupported,
                    format!(
                        "cannot connect to {addr}: {} runs both sides in one process; \
                         run without <srv_addr>",
                        if self.threads {
                            "--threads"
                        } else {
                            prov.name()
                        }
                    ),
                ));
            }
            if self.server {
                return Err(Failure::new(
                    Error::NotSupported,
                    format!(
                        "--server: {} runs both sides in one process",
                        if self.threads {
                            "--threads"
                        } else {
                            prov.name()
                        }
                    ),
                ));
            }
            // As with fi_pingpong's loopback runs: -B/-P put the in-process control
            // stream on TCP.
            let spec = match (self.src_port, self.dst_port) {
                (None, None) => CtrlSpec::InMemory,
                (listen, connect) => CtrlSpec::Tcp {
                    listen: listen.filter(|&p| p != 0).unwrap_or(DEFAULT_CTRL_PORT),
                    connect: connect.filter(|&p| p != 0),
                    ipv6: self.ipv6,
                },
            };
            return Ok((prov, Role::Threads(spec)));
        }
        let role = match (&self.srv_addr, server) {
            (Some(_), true) => {
                return Err(Failure::usage(
                    "-B/--server run the server; a client takes <srv_addr> and -P",
                ))
            }
            (Some(host), false) => Role::Client {
                host: host.clone(),
                port: self.dst_port.unwrap_or(DEFAULT_CTRL_PORT),
            },
            (None, true) => {
                if self.dst_port.is_some() {
                    return Err(Failure::usage(
                        "-P is the client's option (with <srv_addr>)",
                    ));
                }
                Role::Server {
                    port: self.src_port.unwrap_or(DEFAULT_CTRL_PORT),
                    ipv6: self.ipv6,
                    spawned: self.spawned,
                }
            }
            (None, false) => {
                if self.dst_port.is_some() {
                    return Err(Failure::usage("-P needs <srv_addr>"));
                }
                Role::Pair { ipv6: self.ipv6 }
            }
        };
        Ok((prov, role))
    }
}

/// The control connection's byte stream.
pub enum Stream {
    /// Between processes (or threads, with `-B`/`-P`).
    Tcp(TcpStream),
    /// Between the two threads of one process.
    Unix(UnixStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

/// Control messages, as `fi_pingpong` sends them (with the C string terminator).
const SYNC_Q: &[u8] = b"q\0";
const SYNC_A: &[u8] = b"a\0";
const CNT_OK: &[u8] = b"cnt ok\0";
const CNT_LEN: usize = 10;
/// Longest endpoint name accepted from a peer: fabtests' `PP_MAX_CTRL_MSG` is 64, but
/// the composed provider's names (both halves' and a node identity) are longer.
const MAX_NAME: usize = 256;

/// The control connection: `fi_pingpong`'s out-of-band protocol over a byte stream.
pub struct Ctrl {
    s: Stream,
}

impl Ctrl {
    /// Wraps a connected stream.
    pub fn new(s: Stream) -> Ctrl {
        Ctrl { s }
    }

    /// Sends raw bytes.
    pub fn send(&mut self, b: &[u8]) -> Res<()> {
        self.s.write_all(b)?;
        Ok(())
    }

    /// Receives exactly `n` bytes; a closed connection is `FI_ECONNABORTED`.
    pub fn recv_exact(&mut self, n: usize) -> Res<Vec<u8>> {
        let mut b = vec![0; n];
        self.s.read_exact(&mut b).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Failure::new(
                    Error::ConnAborted,
                    "ctrl/read: no data or remote connection closed",
                )
            } else {
                Failure::from(e)
            }
        })?;
        Ok(b)
    }

    /// Receives `want.len()` bytes and checks they are `want`.
    pub fn expect(&mut self, want: &[u8], what: &str) -> Res<()> {
        let got = self.recv_exact(want.len())?;
        if got == want {
            Ok(())
        } else {
            Err(Failure::new(
                Error::Io,
                format!("{what}: unexpected control message {got:?}"),
            ))
        }
    }

    /// `pp_send_name`: big-endian length, then the name.
    pub fn send_name(&mut self, name: &[u8]) -> Res<()> {
        let len = u32::try_from(name.len()).map_err(|_| Failure::new(Error::MsgSize, "name"))?;
        self.send(&len.to_be_bytes())?;
        self.send(name)
    }

    /// `pp_recv_name`.
    pub fn recv_name(&mut self) -> Res<Vec<u8>> {
        let len = self.recv_u32()?;
        if len as usize > MAX_NAME {
            return Err(Failure::new(
                Error::MsgSize,
                format!("peer name longer than {MAX_NAME} bytes"),
            ));
        }
        self.recv_exact(len as usize)
    }

    fn recv_u32(&mut self) -> Res<u32> {
        let b = self.recv_exact(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Sends big-endian `u64`s.
    pub fn send_u64s(&mut self, v: &[u64]) -> Res<()> {
        let b: Vec<u8> = v.iter().flat_map(|x| x.to_be_bytes()).collect();
        self.send(&b)
    }

    /// Receives `N` big-endian `u64`s.
    pub fn recv_u64s<const N: usize>(&mut self) -> Res<[u64; N]> {
        let b = self.recv_exact(8 * N)?;
        let mut out = [0u64; N];
        for (o, c) in out.iter_mut().zip(b.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            *o = u64::from_be_bytes(w);
        }
        Ok(out)
    }

    /// `pp_ctrl_sync`: the client asks, the server answers.
    pub fn sync(&mut self, client: bool) -> Res<()> {
        if client {
            self.send(SYNC_Q)?;
            self.expect(SYNC_A, "sync")
        } else {
            self.expect(SYNC_Q, "sync")?;
            self.send(SYNC_A)
        }
    }

    /// `pp_ctrl_txrx_msg_count`: the client sends its count as 10 bytes of NUL-padded
    /// decimal; the server acknowledges. Returns the client's count on both sides.
    pub fn exchange_count(&mut self, client: bool, count: u64) -> Res<u64> {
        if client {
            let mut b = [0u8; CNT_LEN];
            let digits = count.to_string();
            let n = digits.len().min(CNT_LEN);
            b[..n].copy_from_slice(&digits.as_bytes()[..n]);
            self.send(&b)?;
            self.expect(CNT_OK, "count")?;
            Ok(count)
        } else {
            let b = self.recv_exact(CNT_LEN)?;
            let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
            let n = std::str::from_utf8(&b[..end])
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Failure::new(Error::Io, "count: not a number"))?;
            self.send(CNT_OK)?;
            Ok(n)
        }
    }

    /// Exchanges endpoint names: the client receives the server's first, as in
    /// `fi_pingpong`. Returns the peer's name.
    pub fn exchange_names(&mut self, client: bool, mine: &[u8]) -> Res<Vec<u8>> {
        if client {
            let peer = self.recv_name()?;
            self.send_name(mine)?;
            Ok(peer)
        } else {
            self.send_name(mine)?;
            self.recv_name()
        }
    }

    /// A [`Watch`] on this connection's peer, also stopping on `stop`, when the parent
    /// process `parent` exits, or after `timeout` without a completion.
    pub fn watch(
        &self,
        stop: Option<Arc<AtomicBool>>,
        parent: Option<u32>,
        timeout: Option<Duration>,
    ) -> Res<Watch> {
        let sock = match &self.s {
            Stream::Tcp(s) => Some(s.try_clone()?),
            // In-process: the other thread sets `stop` when it fails.
            Stream::Unix(_) => None,
        };
        Ok(Watch {
            stop,
            sock,
            parent,
            timeout,
            idle_since: Cell::new(None),
            polls: Cell::new(0),
            last: Cell::new(Instant::now()),
        })
    }
}

/// What a busy wait checks besides the CQ: the other thread's stop flag, the control
/// connection (closed: the peer is gone), for a spawned server the parent process, and
/// for a client how long no completion came (a stuck run fails instead of hanging).
pub struct Watch {
    stop: Option<Arc<AtomicBool>>,
    sock: Option<TcpStream>,
    parent: Option<u32>,
    timeout: Option<Duration>,
    /// When the current stretch without completions was first noticed.
    idle_since: Cell<Option<Instant>>,
    /// Empty polls since the last completion ([`Watch::busy`]).
    polls: Cell<u32>,
    last: Cell<Instant>,
}

impl Watch {
    /// A watch that only follows `stop`.
    pub fn flag(stop: Arc<AtomicBool>) -> Watch {
        Watch {
            stop: Some(stop),
            sock: None,
            parent: None,
            timeout: None,
            idle_since: Cell::new(None),
            polls: Cell::new(0),
            last: Cell::new(Instant::now()),
        }
    }

    /// Called once per empty CQ poll; once a wait has lasted [`POLLS_PER_CHECK`]
    /// polls, and every as many polls after, yields and checks that the peer is still
    /// there. `Err` when it is not.
    #[inline]
    pub fn idle(&self) -> Res<()> {
        if let Some(s) = &self.stop {
            if s.load(Ordering::Relaxed) {
                return Err(Failure::new(Error::Canceled, "peer side stopped"));
            }
        }
        let n = self.polls.get().wrapping_add(1);
        self.polls.set(n);
        // No PAUSE between polls: on this project's Zen 4 host one takes 64 cycles
        // (26 ns), a quarter of a small message's one-way time, and a message landing
        // during it waits for it (fi_pingpong and ucx_perftest do not pause either).
        if n.is_multiple_of(POLLS_PER_CHECK) {
            self.check()?;
            // Lets the peer run when both share a core (threads, or a busy machine).
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Called when a completion arrived: ends a stretch of idleness.
    #[inline]
    pub fn busy(&self) {
        self.idle_since.set(None);
        self.polls.set(0);
    }

    #[cold]
    fn check(&self) -> Res<()> {
        let now = Instant::now();
        if now.duration_since(self.last.get()) < WATCH_PERIOD {
            return Ok(());
        }
        self.last.set(now);
        if let Some(t) = self.timeout {
            match self.idle_since.get() {
                None => self.idle_since.set(Some(now)),
                Some(since) if now.duration_since(since) > t => {
                    return Err(Failure::new(
                        Error::TimedOut,
                        format!(
                            "no completion for {} s: the run is stuck (-T sets the limit)",
                            t.as_secs()
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        if let Some(pid) = self.parent {
            if std::os::unix::process::parent_id() != pid {
                return Err(Failure::new(Error::ConnAborted, "parent process exited"));
            }
        }
        if let Some(s) = &self.sock {
            // The stream is blocking for the control protocol; peek without blocking.
            s.set_nonblocking(true)?;
            let r = s.peek(&mut [0u8; 1]);
            s.set_nonblocking(false)?;
            let closed = || {
                Err(Failure::new(
                    Error::ConnAborted,
                    "peer closed the control connection",
                ))
            };
            match r {
                Ok(0) => return closed(),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return closed(),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

/// `getinfo` on `Stack<P>`, first match of `hints`.
pub fn getinfo_first<P: Provider>(hints: &Hints) -> Res<Info> {
    getinfo::<Stack<P>>(Some(hints))
        .call("fi_getinfo")?
        .into_iter()
        .next()
        .ok_or_else(|| Failure::call("fi_getinfo", Error::NoData))
}

/// An endpoint with a transmit and a receive CQ and an AV, on `Stack<P>`.
///
/// Field order is drop order: the endpoint goes first, cancelling what is still posted.
pub struct Objects<P: Provider> {
    /// The endpoint, enabled.
    pub ep: Endpoint<Stack<P>>,
    /// Transmit completions.
    pub txcq: Cq<Stack<P>>,
    /// Receive completions (and remote CQ data).
    pub rxcq: Cq<Stack<P>>,
    /// The AV, holding the peer after [`Objects::connect`] (RDM and DGRAM; an MSG
    /// endpoint binds none).
    pub av: AddressVector<Stack<P>>,
    /// The domain.
    pub domain: Domain<Stack<P>>,
    /// The EQ of an MSG endpoint's connection.
    pub eq: Option<EventQueue<Stack<P>>>,
    /// The fabric.
    pub fabric: Fabric<Stack<P>>,
}

impl<P: Provider> Objects<P> {
    /// `fi_fabric` .. `fi_enable`, for an endpoint that is not MSG.
    pub fn open(info: &Info) -> Res<Self> {
        let fabric = Fabric::<Stack<P>>::open(info).call("fi_fabric")?;
        Self::build(fabric, info, None)
    }

    /// `fi_domain` .. `fi_enable` in `fabric`; an MSG endpoint binds `eq` instead of
    /// the AV.
    fn build(fabric: Fabric<Stack<P>>, info: &Info, eq: Option<EventQueue<Stack<P>>>) -> Res<Self> {
        let domain = fabric.domain(info).call("fi_domain")?;
        let txcq = domain
            .cq(&CqAttr {
                size: info.tx_attr.size,
                ..CqAttr::DEFAULT
            })
            .call("fi_cq_open")?;
        let rxcq = domain
            .cq(&CqAttr {
                size: info.rx_attr.size,
                ..CqAttr::DEFAULT
            })
            .call("fi_cq_open")?;
        let av = domain.av(&AvAttr::DEFAULT).call("fi_av_open")?;
        let ep = domain.endpoint(info).call("fi_endpoint")?;
        match &eq {
            Some(eq) => ep.bind_eq(eq).call("fi_ep_bind")?,
            None => ep.bind_av(&av).call("fi_ep_bind")?,
        }
        ep.bind_cq(&txcq, BindFlags::TRANSMIT).call("fi_ep_bind")?;
        ep.bind_cq(&rxcq, BindFlags::RECV).call("fi_ep_bind")?;
        ep.enable().call("fi_enable")?;
        Ok(Objects {
            ep,
            txcq,
            rxcq,
            av,
            domain,
            eq,
            fabric,
        })
    }

    /// Exchanges names over `ctrl` and inserts the peer's into the AV.
    pub fn connect(&self, ctrl: &mut Ctrl, client: bool) -> Res<FiAddr> {
        let peer = ctrl.exchange_names(client, &self.ep.name())?;
        self.av.insert(&peer).call("fi_av_insert")
    }

    /// Opens the objects for `info` and reaches the peer: an RDM or DGRAM endpoint
    /// exchanges names over `ctrl` ([`Objects::connect`]); for MSG the server opens a
    /// passive endpoint, sends its name over `ctrl` and accepts the request, the
    /// client connects to it. Returns the address data goes to (`FI_ADDR_UNSPEC` on
    /// a connection).
    pub fn establish(
        info: &Info,
        ctrl: &mut Ctrl,
        client: bool,
        watch: &Watch,
    ) -> Res<(Self, FiAddr)> {
        if info.ep_attr.ep_type != EpType::Msg {
            let o = Self::open(info)?;
            let peer = o.connect(ctrl, client)?;
            return Ok((o, peer));
        }
        let fabric = Fabric::<Stack<P>>::open(info).call("fi_fabric")?;
        let eq = fabric.eq(&EqAttr::default()).call("fi_eq_open")?;
        let o = if client {
            let name = ctrl.recv_name()?;
            let o = Self::build(fabric, info, Some(eq))?;
            o.ep.connect(&name, &[]).call("fi_connect")?;
            o
        } else {
            let pep = fabric.passive_ep(info).call("fi_passive_ep")?;
            pep.bind_eq(&eq).call("fi_pep_bind")?;
            pep.listen().call("fi_listen")?;
            ctrl.send_name(&pep.name())?;
            let req = wait_eq(&eq, watch, EqEvent::ConnReq, "fi_listen")?;
            let conn = req
                .conn
                .ok_or_else(|| Failure::new(Error::Io, "FI_CONNREQ without an info"))?;
            let o = Self::build(fabric, &conn, Some(eq))?;
            o.ep.accept(&[]).call("fi_accept")?;
            o
        };
        if let Some(eq) = &o.eq {
            wait_eq(
                eq,
                watch,
                EqEvent::Connected,
                if client { "fi_connect" } else { "fi_accept" },
            )?;
        }
        Ok((o, FiAddr::UNSPEC))
    }

    /// The peer's address as the provider names it: from the connection of an MSG
    /// endpoint, else from the AV.
    pub fn peer_name(&self, peer: FiAddr) -> Res<Vec<u8>> {
        if self.eq.is_some() {
            self.ep.peer().call("fi_getpeer")
        } else {
            self.av.lookup(peer).call("fi_av_lookup")
        }
    }
}

/// Reads `eq` until event `want`; an error event (a refused or failed connection)
/// becomes a `Failure` naming `call`.
fn wait_eq<P: Provider>(
    eq: &EventQueue<Stack<P>>,
    watch: &Watch,
    want: EqEvent,
    call: &str,
) -> Res<EqEntry> {
    loop {
        match eq.read(false) {
            Ok(e) if e.event == want => return Ok(e),
            Ok(e) => {
                return Err(Failure::new(
                    Error::Io,
                    format!("{call}: {:?} where {want:?} was expected", e.event),
                ))
            }
            Err(Error::Avail) => {
                let e = eq.read_err(false).call("fi_eq_readerr")?;
                return Err(Failure::new(e.err, format!("{call}: {}", e.err)));
            }
            Err(Error::Again) => watch.idle()?,
            Err(e) => return Err(Failure::call("fi_eq_read", e)),
        }
    }
}

/// `-e`: an endpoint type among `allowed`.
pub fn parse_ep_type(s: &str, allowed: &[EpType]) -> Res<EpType> {
    let t = match s.to_ascii_lowercase().as_str() {
        "msg" => EpType::Msg,
        "rdm" => EpType::Rdm,
        "dgram" => EpType::Dgram,
        _ => EpType::Unspec,
    };
    if allowed.contains(&t) {
        Ok(t)
    } else {
        Err(Failure::usage(format!("Unknown endpoint : {s}")))
    }
}

/// [`getinfo_first`] for `hints` of endpoint type `ep`: MSG on a provider without
/// connection management is a clear error, not a bare `FI_ENODATA`.
pub fn getinfo_ep<P: Provider>(hints: Hints, ep: EpType) -> Res<Info> {
    let hints = hints.ep_type(ep);
    match getinfo_first::<P>(&hints) {
        Err(f) if ep == EpType::Msg && f.code == Error::NoData.code() => Err(Failure::new(
            Error::NotSupported,
            format!(
                "fi_endpoint(): ret=-{} ({}): FI_EP_MSG endpoints are not supported by the \
                 {} provider (tcp and loopback have them); use -e rdm",
                Error::NotSupported.code(),
                Error::NotSupported.as_str(),
                P::NAME
            ),
        )),
        r => r,
    }
}

/// Reads what completions `cq` has into `out` without waiting: `Ok(0)` when none. An
/// error entry becomes a `Failure` naming `what`.
#[inline]
pub fn read_cq<P: Provider>(
    cq: &Cq<Stack<P>>,
    out: &mut [CqTaggedEntry],
    what: &str,
) -> Res<usize> {
    match cq.read(out) {
        Ok(n) => Ok(n),
        Err(Error::Again) => Ok(0),
        Err(Error::Avail) => {
            let err = cq.read_err().call("fi_cq_readerr")?;
            Err(Failure::new(
                err.err,
                format!("{what} completion error: {}", cq.strerror(&err)),
            ))
        }
        Err(err) => Err(Failure::call("fi_cq_read", err)),
    }
}

/// Busy-polls `cq` (each read runs progress) for one completion.
#[inline]
pub fn wait_one<P: Provider>(cq: &Cq<Stack<P>>, watch: &Watch, what: &str) -> Res<CqTaggedEntry> {
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        if read_cq::<P>(cq, &mut e, what)? > 0 {
            watch.busy();
            return Ok(e[0]);
        }
        watch.idle()?;
    }
}

/// Busy-polls `cq` until `n` completions have been read, reading them into `e` (the
/// caller's buffer, reused so that a short wait costs no initialisation of a fresh one).
#[inline]
pub fn wait_n<P: Provider>(
    cq: &Cq<Stack<P>>,
    watch: &Watch,
    e: &mut [CqTaggedEntry],
    n: usize,
    what: &str,
) -> Res<()> {
    let room = e.len();
    let mut got = 0;
    while got < n {
        let k = read_cq::<P>(cq, &mut e[..(n - got).min(room)], what)?;
        if k == 0 {
            watch.idle()?;
        } else {
            watch.busy();
        }
        got += k;
    }
    Ok(())
}

/// Retries `post` while it reports `FI_EAGAIN` (a full queue or a busy peer), running
/// `drain` (which should read completions, freeing queue slots) between tries.
#[inline(always)]
pub fn post_retry(
    watch: &Watch,
    name: &str,
    mut post: impl FnMut() -> fabric::Result<()>,
    mut drain: impl FnMut() -> Res<()>,
) -> Res<()> {
    loop {
        match post() {
            Err(Error::Again) => {
                drain()?;
                watch.idle()?;
            }
            r => return r.call(name),
        }
    }
}

/// One side of a tool, written once for every provider.
pub trait Tool: Sync {
    /// A result the client reports (one per size).
    type Out;
    /// Runs one side of the test with provider `P` on `Stack<P>`: `client` tells which.
    /// The client hands each result to `report`.
    fn side<P: ToolProvider>(
        &self,
        ctrl: &mut Ctrl,
        watch: &Watch,
        client: bool,
        report: &mut dyn FnMut(Self::Out) -> Res<()>,
    ) -> Res<()>;

    /// The client's printed form of result `out`: its JSON object when asked for, else
    /// its table row, under the table's header when it is the `first`.
    fn render(&self, out: &Self::Out, first: bool) -> String;
}

/// A result as [`Tool::render`] prints it: `json` when given, else `line()`, under
/// `header()` for the first result.
pub fn render(
    json: Option<String>,
    first: bool,
    header: fn() -> String,
    line: impl FnOnce() -> String,
) -> String {
    match json {
        Some(j) => j,
        None if first => format!("{}\n{}", header(), line()),
        None => line(),
    }
}

/// [`render`] of a bandwidth tool's result, whose table row is its [`Bw`] line.
pub fn render_bw(json: Option<String>, first: bool, bw: &Bw) -> String {
    render(json, first, Bw::header, || bw.line())
}

/// The whole tool: [`run`], printing each result to `out` on the client side
/// ([`Tool::render`]) and returning them. `child_args` are the arguments a
/// two-process run hands its server child.
pub fn run_printing<T: Tool>(
    tool: &T,
    setup: &Setup,
    child_args: &[OsString],
    out: &mut dyn Write,
) -> Res<Vec<T::Out>> {
    let mut results = Vec::new();
    run(tool, setup, child_args, &mut |p| {
        emit(out, &tool.render(&p, results.is_empty()))?;
        results.push(p);
        Ok(())
    })?;
    Ok(results)
}

/// A tool's exit status: success, or `result`'s failure printed on stderr (marked as
/// the server child's when `spawned`) and its exit code.
pub fn exit<T>(result: Res<T>, spawned: bool) -> std::process::ExitCode {
    match result {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(f) => {
            print_failure(&f, spawned);
            std::process::ExitCode::from(f.exit_code())
        }
    }
}

/// Where and how a run happens: provider, role, client timeout, debug output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// `-p`.
    pub prov: Prov,
    /// From the address and port options.
    pub role: Role,
    /// `-T`: the client's limit without a completion.
    pub timeout: Option<Duration>,
    /// `-v`.
    pub debug: bool,
}

impl PeerArgs {
    /// The [`Setup`] these options ask for.
    pub fn setup(&self, debug: bool) -> Res<Setup> {
        let (prov, role) = self.role()?;
        Ok(Setup {
            prov,
            role,
            timeout: self.timeout(),
            debug,
        })
    }
}

/// A provider the tools run on, with what only some providers offer.
pub trait ToolProvider: Provider {
    /// Registers `len` bytes of provider-allocated shared memory that peers on the host
    /// read, write and update directly (shm's directly mapped regions, kept in `seg`), or
    /// `None` where the provider has no such memory.
    fn direct_target<'a>(
        domain: &Domain<Stack<Self>>,
        seg: &'a mut Option<fabric_shm::MappedSegment>,
        len: usize,
        attr: &MrAttr,
    ) -> Res<Option<fabric_shm::DirectMr<'a, Stack<Self>>>>;

    /// Attaches the directly mapped region that the peer endpoint `name` registered
    /// under `key` ([`fabric_shm::RemoteKey`]), or `None` where the provider has none.
    fn attach(name: &[u8], key: u64) -> Res<Option<fabric_shm::RemoteKey>>;
}

impl ToolProvider for Shm {
    fn direct_target<'a>(
        domain: &Domain<Stack<Shm>>,
        seg: &'a mut Option<fabric_shm::MappedSegment>,
        len: usize,
        attr: &MrAttr,
    ) -> Res<Option<fabric_shm::DirectMr<'a, Stack<Shm>>>> {
        let seg = seg.insert(fabric_shm::MappedSegment::new(len).call("MappedSegment::new")?);
        Ok(Some(
            seg.register(domain, attr).call("MappedSegment::register")?,
        ))
    }

    fn attach(name: &[u8], key: u64) -> Res<Option<fabric_shm::RemoteKey>> {
        Ok(Some(
            fabric_shm::RemoteKey::attach(name, key).call("RemoteKey::attach")?,
        ))
    }
}

impl ToolProvider for Loopback {
    fn direct_target<'a>(
        _domain: &Domain<Stack<Loopback>>,
        _seg: &'a mut Option<fabric_shm::MappedSegment>,
        _len: usize,
        _attr: &MrAttr,
    ) -> Res<Option<fabric_shm::DirectMr<'a, Stack<Loopback>>>> {
        Ok(None)
    }

    fn attach(_name: &[u8], _key: u64) -> Res<Option<fabric_shm::RemoteKey>> {
        Ok(None)
    }
}

impl ToolProvider for Tcp {
    fn direct_target<'a>(
        _domain: &Domain<Stack<Tcp>>,
        _seg: &'a mut Option<fabric_shm::MappedSegment>,
        _len: usize,
        _attr: &MrAttr,
    ) -> Res<Option<fabric_shm::DirectMr<'a, Stack<Tcp>>>> {
        Ok(None)
    }

    fn attach(_name: &[u8], _key: u64) -> Res<Option<fabric_shm::RemoteKey>> {
        Ok(None)
    }
}

// shm's directly mapped regions are registered through shm stacks only.
impl ToolProvider for ShmTcp {
    fn direct_target<'a>(
        _domain: &Domain<Stack<ShmTcp>>,
        _seg: &'a mut Option<fabric_shm::MappedSegment>,
        _len: usize,
        _attr: &MrAttr,
    ) -> Res<Option<fabric_shm::DirectMr<'a, Stack<ShmTcp>>>> {
        Ok(None)
    }

    fn attach(_name: &[u8], _key: u64) -> Res<Option<fabric_shm::RemoteKey>> {
        Ok(None)
    }
}

/// Runs `tool` as `setup` says; the client's results go to `report`. `child_args` are
/// the arguments a [`Role::Pair`] run gives its server child (the tool's own
/// arguments; the server options are appended).
pub fn run<T: Tool>(
    tool: &T,
    setup: &Setup,
    child_args: &[OsString],
    report: &mut dyn FnMut(T::Out) -> Res<()>,
) -> Res<()> {
    match setup.prov {
        Prov::Shm => run_on::<T, Shm>(tool, setup, child_args, report),
        Prov::Loopback => run_on::<T, Loopback>(tool, setup, child_args, report),
        Prov::Tcp => run_on::<T, Tcp>(tool, setup, child_args, report),
        Prov::Hybrid => run_on::<T, ShmTcp>(tool, setup, child_args, report),
    }
}

/// [`run`] for one provider: `Stack<P>` all the way down.
fn run_on<T: Tool, P: ToolProvider>(
    tool: &T,
    setup: &Setup,
    child_args: &[OsString],
    report: &mut dyn FnMut(T::Out) -> Res<()>,
) -> Res<()> {
    let dbg = |m: std::fmt::Arguments<'_>| {
        if setup.debug {
            eprintln!("[debug] {m}");
        }
    };
    let timeout = setup.timeout;
    match &setup.role {
        Role::Threads(spec) => run_threads::<T, P>(tool, *spec, timeout, report),
        Role::Server {
            port,
            ipv6,
            spawned,
        } => {
            let listener = listen(*port, *ipv6, !*spawned)?;
            let port = listener.local_addr()?.port();
            if *spawned {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{PORT_LINE}{port}")?;
                out.flush()?;
            }
            dbg(format_args!("SERVER: waiting for connection on {port}"));
            let parent = spawned.then(std::os::unix::process::parent_id);
            let stream = accept(&listener, parent)?;
            drop(listener);
            let mut ctrl = Ctrl::new(Stream::Tcp(stream));
            let watch = ctrl.watch(None, parent, None)?;
            tool.side::<P>(&mut ctrl, &watch, false, &mut |_| Ok(()))
        }
        Role::Client { host, port } => {
            let stream = connect(host, *port)?;
            dbg(format_args!("CLIENT: connected to {host}:{port}"));
            let mut ctrl = Ctrl::new(Stream::Tcp(stream));
            let watch = ctrl.watch(None, None, timeout)?;
            tool.side::<P>(&mut ctrl, &watch, true, report)
        }
        Role::Pair { ipv6 } => {
            let child = ChildServer::spawn(child_args)?;
            dbg(format_args!(
                "CLIENT: server child {} listens on {}",
                child.child.id(),
                child.port
            ));
            let host = if *ipv6 { "::1" } else { "127.0.0.1" };
            let run = connect(host, child.port).and_then(|stream| {
                let mut ctrl = Ctrl::new(Stream::Tcp(stream));
                let watch = ctrl.watch(None, None, timeout)?;
                tool.side::<P>(&mut ctrl, &watch, true, report)
            });
            // The child's own report of what went wrong is on stderr already; when both
            // failed, this side's error comes first and the child's status follows.
            let ok = run.is_ok();
            match (run, child.finish(ok)) {
                (Ok(()), c) => c,
                (Err(r), Ok(())) => Err(r),
                // The child only saw this side go away.
                (Err(r), Err(c)) if c.code == Error::ConnAborted.code() => Err(r),
                (Err(r), Err(c)) => Err(Failure {
                    code: r.code,
                    msg: format!("{}\n{}", r.msg, c.msg),
                }),
            }
        }
    }
}

/// Both sides in this process, each on its own thread with its own objects.
fn run_threads<T: Tool, P: ToolProvider>(
    tool: &T,
    spec: CtrlSpec,
    timeout: Option<Duration>,
    report: &mut dyn FnMut(T::Out) -> Res<()>,
) -> Res<()> {
    let (server_stream, client_stream) = match spec {
        CtrlSpec::InMemory => {
            let (a, b) = UnixStream::pair()?;
            (Stream::Unix(a), Stream::Unix(b))
        }
        CtrlSpec::Tcp {
            listen: port,
            connect,
            ipv6,
        } => {
            let listener = listen(port, ipv6, false)?;
            let port = connect.unwrap_or(listener.local_addr()?.port());
            let client = TcpStream::connect(localhost(port, ipv6)).map_err(|e| {
                let msg = format!("failed to connect to control port {port}: {e}");
                Failure::new(Error::from(e), msg)
            })?;
            let (server, _) = listener.accept()?;
            server.set_nodelay(true)?;
            client.set_nodelay(true)?;
            (Stream::Tcp(server), Stream::Tcp(client))
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| {
        let server_stop = stop.clone();
        let server = s.spawn(move || {
            let mut ctrl = Ctrl::new(server_stream);
            let r = ctrl
                .watch(Some(server_stop.clone()), None, None)
                .and_then(|w| tool.side::<P>(&mut ctrl, &w, false, &mut |_| Ok(())));
            if r.is_err() {
                server_stop.store(true, Ordering::Relaxed);
            }
            r
        });
        let mut ctrl = Ctrl::new(client_stream);
        let client = ctrl
            .watch(Some(stop.clone()), None, timeout)
            .and_then(|w| tool.side::<P>(&mut ctrl, &w, true, report));
        if client.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        // Unblocks a server waiting on the control stream.
        drop(ctrl);
        let server = server
            .join()
            .unwrap_or_else(|_| Err(Failure::new(Error::Other, "server thread panicked")));
        // The first real error wins over the other side's "peer stopped".
        match (client, server) {
            (Ok(()), r) | (r, Ok(())) => r,
            (Err(c), Err(s)) if is_consequence(&c) => Err(s),
            (Err(c), _) => Err(c),
        }
    })
}

/// Whether a side failed only because the other one did.
fn is_consequence(f: &Failure) -> bool {
    f.code == Error::Canceled.code() || f.code == Error::ConnAborted.code()
}

fn localhost(port: u16, ipv6: bool) -> SocketAddr {
    if ipv6 {
        (Ipv6Addr::LOCALHOST, port).into()
    } else {
        (Ipv4Addr::LOCALHOST, port).into()
    }
}

/// Binds the control port: on every interface for a server a client may reach by any
/// of the host's addresses, else on localhost.
fn listen(port: u16, ipv6: bool, any: bool) -> Res<TcpListener> {
    let addr: SocketAddr = match (any, ipv6) {
        (true, false) => (Ipv4Addr::UNSPECIFIED, port).into(),
        (true, true) => (Ipv6Addr::UNSPECIFIED, port).into(),
        (false, v6) => localhost(port, v6),
    };
    TcpListener::bind(addr).map_err(|e| {
        let msg = format!("bind(): control port {port}: {e}");
        Failure::new(Error::from(e), msg)
    })
}

/// Accepts the client. A spawned server (`parent` set) gives up when its parent exits
/// or does not connect in time, so it never lingers.
fn accept(listener: &TcpListener, parent: Option<u32>) -> Res<TcpStream> {
    let stream = match parent {
        None => listener.accept()?.0,
        Some(pid) => {
            listener.set_nonblocking(true)?;
            let deadline = Instant::now() + SPAWNED_ACCEPT_TIMEOUT;
            loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if std::os::unix::process::parent_id() != pid {
                            return Err(Failure::new(
                                Error::ConnAborted,
                                "parent process exited before connecting",
                            ));
                        }
                        if Instant::now() > deadline {
                            return Err(Failure::new(
                                Error::TimedOut,
                                "accept(): no client connected in time",
                            ));
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    };
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Connects to the server's control port, retrying for a few seconds while it is
/// refused (the server may still be starting).
fn connect(host: &str, port: u16) -> Res<TcpStream> {
    let deadline = Instant::now() + CONNECT_RETRY;
    loop {
        match TcpStream::connect((host, port)) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                let msg = format!("failed to connect to {host}:{port}: {e}");
                return Err(Failure::new(Error::from(e), msg));
            }
        }
    }
}

/// The server side of a [`Role::Pair`] run: this program started again with
/// `--server -B 0 --spawned`. Dropping it kills and reaps the child, so no error path
/// leaves it running.
pub struct ChildServer {
    child: Child,
    /// Keeps the pipe open: the child never gets `EPIPE` for its (empty) output.
    _out: BufReader<ChildStdout>,
    /// The port the child listens on.
    port: u16,
    reaped: bool,
}

impl ChildServer {
    /// Starts `current_exe() args.. --server -B 0 --spawned` and reads the port it
    /// listens on from its stdout. `args` are this run's own (a `-6` among them makes
    /// the child listen on IPv6 localhost too).
    pub fn spawn(args: &[OsString]) -> Res<ChildServer> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .args(["--server", "-B", "0", "--spawned"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().map_err(|e| {
            let msg = format!("cannot start the server process: {e}");
            Failure::new(Error::from(e), msg)
        })?;
        let Some(out) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Failure::new(Error::Other, "server process has no stdout"));
        };
        let mut cs = ChildServer {
            child,
            _out: BufReader::new(out),
            port: 0,
            reaped: false,
        };
        let mut line = String::new();
        cs._out.read_line(&mut line)?;
        cs.port = line
            .trim()
            .strip_prefix(PORT_LINE)
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| {
                Failure::new(
                    Error::Io,
                    "the server process did not report its control port",
                )
            })?;
        Ok(cs)
    }

    /// Waits for the child to exit (killing it after a timeout) and turns a failure
    /// into `Err`. After a successful run the child has `CHILD_EXIT_TIMEOUT` to exit;
    /// after a failed one (`ok` false) it is given a moment to exit by itself (having
    /// seen the connection close), so that its own failure can be reported, then killed.
    pub fn finish(mut self, ok: bool) -> Res<()> {
        self.reaped = true;
        let deadline = Instant::now()
            + if ok {
                CHILD_EXIT_TIMEOUT
            } else {
                CHILD_EXIT_GRACE
            };
        let status = loop {
            if let Some(st) = self.child.try_wait()? {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                if !ok {
                    return Ok(());
                }
                return Err(Failure::new(
                    Error::TimedOut,
                    "the server process did not exit after the run; killed it",
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if status.success() {
            Ok(())
        } else {
            let code = status.code().unwrap_or(1);
            Err(Failure {
                code,
                msg: format!("the server process failed: {status}"),
            })
        }
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Which sizes to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizes {
    /// [`DEFAULT_SIZES`].
    Default,
    /// 0, 1, 2, 3, 4, 6, 8, 12, ... (powers of two and one and a half times them).
    All,
    /// One size.
    One(usize),
}

/// `-S`: a byte count with an optional `k`/`m`/`g` suffix, or `all`.
pub fn parse_size(s: &str) -> Res<Sizes> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Sizes::All);
    }
    let bad = || Failure::usage(format!("Error parsing \"{s}\": Invalid argument"));
    let (num, shift) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: usize = num.parse().map_err(|_| bad())?;
    n.checked_mul(1 << shift).map(Sizes::One).ok_or_else(bad)
}

/// The sizes to run given the largest message (`generate_test_sizes`).
pub fn test_sizes(sizes: Sizes, max: usize) -> Vec<usize> {
    match sizes {
        Sizes::One(n) => vec![n],
        Sizes::Default => DEFAULT_SIZES
            .into_iter()
            .take_while(|&s| s <= max)
            .collect(),
        Sizes::All => {
            let mut v = vec![0];
            if max >= 1 {
                v.push(1);
            }
            for i in 1..usize::BITS - 1 {
                let pow = 1usize << i;
                if pow > max {
                    break;
                }
                v.push(pow);
                let half_up = pow + pow / 2;
                if half_up > max {
                    break;
                }
                v.push(half_up);
            }
            v
        }
    }
}

/// Largest size of a bandwidth tool's `-S all` run (`fabtests`' largest test size).
pub const BW_MAX_ALL: usize = 8 << 20;
/// Largest buffer a bandwidth tool allocates for a window (`-W` x `-S`).
pub const BW_MAX_WINDOW_BYTES: usize = 1 << 30;

/// The options the bandwidth tools share (`fabtests`' benchmark options).
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct BwArgs {
    /// specific transfer size or 'all' (default: 64, 256, 1k, 4k, 64k, 1m)
    #[arg(short = 'S', value_name = "size")]
    pub size: Option<String>,
    /// transfers in flight before waiting for their completions
    #[arg(short = 'W', value_name = "window", default_value_t = 64)]
    pub window: usize,
    /// timed transfers per size (by size: 20000, 2000 from 64k, 200 from 1m)
    #[arg(short = 'I', value_name = "number")]
    pub iterations: Option<usize>,
    /// untimed transfers before the timed ones
    #[arg(short = 'w', value_name = "number", default_value_t = 10)]
    pub warmup: usize,
    /// print one JSON object per size instead of the table
    #[arg(long = "json")]
    pub json: bool,
    /// enable debugging output
    #[arg(short = 'v')]
    pub debug: bool,
    /// endpoint type: msg|rdm (rdm)
    #[arg(
        short = 'e',
        value_name = "ep_type",
        default_value = "rdm",
        hide_default_value = true
    )]
    pub ep_type: String,
}

/// Validated [`BwArgs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwOpts {
    /// `-S`.
    pub sizes: Sizes,
    /// `-W`, at least 1.
    pub window: usize,
    /// `-I`, at least 1 when given.
    pub iterations: Option<usize>,
    /// `-w`.
    pub warmup: usize,
    /// `--json`.
    pub json: bool,
    /// `-v`.
    pub debug: bool,
    /// `-e`: RDM, or MSG over a connection.
    pub ep_type: EpType,
}

impl BwArgs {
    /// Checks the values.
    pub fn opts(&self) -> Res<BwOpts> {
        if self.window == 0 {
            return Err(Failure::usage("-W: the window must be at least 1"));
        }
        if self.iterations == Some(0) {
            return Err(Failure::usage("-I: the iteration count must be at least 1"));
        }
        let sizes = self
            .size
            .as_deref()
            .map_or(Ok(Sizes::Default), parse_size)?;
        if let Sizes::One(n) = sizes {
            if n.checked_mul(self.window)
                .is_none_or(|b| b > BW_MAX_WINDOW_BYTES)
            {
                return Err(Failure::usage(format!(
                    "-S {n} with -W {}: a window above {} bytes; use a smaller window",
                    self.window, BW_MAX_WINDOW_BYTES
                )));
            }
        }
        Ok(BwOpts {
            sizes,
            window: self.window,
            iterations: self.iterations,
            warmup: self.warmup,
            json: self.json,
            debug: self.debug,
            ep_type: parse_ep_type(&self.ep_type, &[EpType::Rdm, EpType::Msg])?,
        })
    }
}

impl BwOpts {
    /// Timed transfers for one size (`size_to_count` of a bandwidth test without `-I`).
    pub fn iterations_for(&self, size: usize) -> usize {
        self.iterations.unwrap_or(match size {
            s if s >= 1 << 20 => 200,
            s if s >= 1 << 16 => 2000,
            _ => 20_000,
        })
    }

    /// The sizes to run for a provider whose largest message is `max_msg`: `-S all` is
    /// every size from 1 byte to 8 MiB (or `max_msg`) whose window fits the buffer limit.
    pub fn sizes_for(&self, max_msg: usize) -> Res<Vec<usize>> {
        let v = match self.sizes {
            Sizes::One(n) if n > max_msg => {
                return Err(Failure::new(
                    Error::MsgSize,
                    format!("-S {n}: larger than the provider's max_msg_size ({max_msg})"),
                ))
            }
            Sizes::One(n) => vec![n],
            Sizes::Default => test_sizes(Sizes::Default, max_msg),
            Sizes::All => test_sizes(Sizes::All, max_msg.min(BW_MAX_ALL))
                .into_iter()
                .filter(|&s| s > 0 && s.saturating_mul(self.window) <= BW_MAX_WINDOW_BYTES)
                .collect(),
        };
        Ok(v)
    }

    /// Prints `msg` on stderr with `-v`.
    pub fn debug(&self, msg: std::fmt::Arguments<'_>) {
        if self.debug {
            eprintln!("[debug] {msg}");
        }
    }
}

/// `size_str` of `fabtests`: binary magnitudes, one decimal below 10.
pub fn size_str(n: u64) -> String {
    let (base, mag) = match n {
        n if n >= 1 << 30 => (1u64 << 30, "g"),
        n if n >= 1 << 20 => (1 << 20, "m"),
        n if n >= 1 << 10 => (1 << 10, "k"),
        _ => (1, ""),
    };
    let frac = if n / base < 10 {
        (n % base) * 10 / base
    } else {
        0
    };
    if frac != 0 {
        format!("{}.{frac}{mag}", n / base)
    } else {
        format!("{}{mag}", n / base)
    }
}

/// `cnt_str` of `fabtests`: decimal magnitudes, truncated.
pub fn cnt_str(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{}b", n / 1_000_000_000),
        n if n >= 1_000_000 => format!("{}m", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// One size of a bandwidth run (`fabtests`' `show_perf` with one transfer per iteration).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bw {
    /// Bytes per transfer.
    pub size: usize,
    /// Timed transfers.
    pub iters: u64,
    /// Transfers in flight at most.
    pub window: usize,
    /// Time of the timed transfers.
    pub elapsed: Duration,
}

impl Bw {
    /// Bytes moved in the timed part.
    pub fn bytes(&self) -> u64 {
        self.iters * self.size as u64
    }

    fn usec(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1e6
    }

    /// 10^6 bytes per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.bytes() as f64 / self.usec()
    }

    /// Microseconds per transfer.
    pub fn usec_per_xfer(&self) -> f64 {
        self.usec() / self.iters as f64
    }

    /// Transfers per second.
    pub fn per_sec(&self) -> f64 {
        self.iters as f64 / self.elapsed.as_secs_f64()
    }

    /// `show_perf`'s header.
    pub fn header() -> String {
        format!(
            "{:<8}{:<8}{:<8}{:>8} {:>10}{:>13}{:>13}",
            "bytes", "iters", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec"
        )
    }

    /// `show_perf`'s line.
    pub fn line(&self) -> String {
        let per = self.usec_per_xfer();
        format!(
            "{:<8}{:<8}{:<8}{:>8.2}s{:>10.2}{:>11.2}{:>11.2}",
            size_str(self.size as u64),
            cnt_str(self.iters),
            size_str(self.bytes()),
            self.elapsed.as_secs_f64(),
            self.mb_per_sec(),
            per,
            1.0 / per,
        )
    }
}

/// `fi_pingpong`'s data-check alphabet and per-message rotation.
const INTEG_ALPHABET: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const INTEG_SEED: usize = 7;

/// `pp_fill_buf`/`pp_check_buf`: message `iter` starts at alphabet index
/// `iter * 7 mod 62` and runs through the alphabet, wrapping. Yields the pattern as
/// `(offset, alphabet slice)` runs so filling and checking are `memcpy`/`memcmp`.
fn pattern_runs(len: usize, iter: u64) -> impl Iterator<Item = (usize, &'static [u8])> {
    let n = INTEG_ALPHABET.len();
    let start = (iter % n as u64) as usize * INTEG_SEED % n;
    let mut off = 0;
    let mut k = start;
    std::iter::from_fn(move || {
        if off >= len {
            return None;
        }
        let run = &INTEG_ALPHABET[k..(k + len - off).min(n)];
        let at = off;
        off += run.len();
        k = 0;
        Some((at, run))
    })
}

/// Fills `buf` with message `iter`'s pattern.
pub fn fill(buf: &mut [u8], iter: u64) {
    for (at, run) in pattern_runs(buf.len(), iter) {
        buf[at..at + run.len()].copy_from_slice(run);
    }
}

/// The first byte of `buf` that differs from message `iter`'s pattern, if any.
pub fn check(buf: &[u8], iter: u64) -> Option<usize> {
    pattern_runs(buf.len(), iter).find_map(|(at, run)| {
        let got = &buf[at..at + run.len()];
        (got != run).then(|| at + got.iter().zip(run).take_while(|(a, b)| a == b).count())
    })
}

/// Writes one line of results and flushes; a closed stdout (`| head`) ends the run.
fn emit(out: &mut dyn Write, text: &str) -> Res<()> {
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(Error::from(e), "writing the results failed"))
}

/// Prints a failure on stderr, marked as the server child's in a spawned server so a
/// two-process run's messages tell their side.
fn print_failure(f: &Failure, spawned: bool) {
    if spawned {
        eprintln!("[server] {}", f.msg);
    } else {
        eprintln!("{}", f.msg);
    }
}

/// The process arguments after the program name, for a [`Role::Pair`]'s child.
pub fn own_args() -> Vec<OsString> {
    std::env::args_os().skip(1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct A {
        #[command(flatten)]
        p: PeerArgs,
    }

    fn role(cli: &[&str]) -> Res<(Prov, Role)> {
        A::try_parse_from(std::iter::once("t").chain(cli.iter().copied()))
            .map_err(|e| Failure::usage(e.to_string()))?
            .p
            .role()
    }

    #[test]
    fn roles_follow_the_command_line() {
        assert_eq!(role(&[]).unwrap(), (Prov::Shm, Role::Pair { ipv6: false }));
        assert_eq!(
            role(&["10.0.0.1", "-P", "5000"]).unwrap().1,
            Role::Client {
                host: "10.0.0.1".into(),
                port: 5000
            }
        );
        assert_eq!(
            role(&["localhost"]).unwrap().1,
            Role::Client {
                host: "localhost".into(),
                port: DEFAULT_CTRL_PORT
            }
        );
        assert_eq!(
            role(&["--server"]).unwrap().1,
            Role::Server {
                port: DEFAULT_CTRL_PORT,
                ipv6: false,
                spawned: false
            }
        );
        assert_eq!(
            role(&["-B", "0", "--spawned", "-6"]).unwrap().1,
            Role::Server {
                port: 0,
                ipv6: true,
                spawned: true
            }
        );
        assert_eq!(
            role(&["--threads"]).unwrap(),
            (Prov::Shm, Role::Threads(CtrlSpec::InMemory))
        );
        assert_eq!(
            role(&["-p", "loopback", "-B", "6000"]).unwrap(),
            (
                Prov::Loopback,
                Role::Threads(CtrlSpec::Tcp {
                    listen: 6000,
                    connect: None,
                    ipv6: false
                })
            )
        );
        assert!(role(&["-P", "5"]).is_err());
        assert!(role(&["--server", "-P", "5"]).is_err());
        assert!(role(&["-B", "5", "host"]).is_err());
        assert_eq!(
            role(&["-p", "loopback", "host"]).unwrap_err().code,
            Error::NotSupported.code()
        );
        assert_eq!(
            role(&["-p", "verbs"]).unwrap_err().msg,
            "fi_getinfo(): ret=-61 (No data available)"
        );
    }

    #[test]
    fn control_protocol_round_trips() {
        let (a, b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let mut s = Ctrl::new(Stream::Unix(b));
            let name = s.exchange_names(false, b"srv").unwrap();
            s.sync(false).unwrap();
            let n = s.exchange_count(false, 0).unwrap();
            let v = s.recv_u64s::<2>().unwrap();
            (name, n, v)
        });
        let mut c = Ctrl::new(Stream::Unix(a));
        assert_eq!(c.exchange_names(true, b"12345678").unwrap(), b"srv");
        c.sync(true).unwrap();
        assert_eq!(c.exchange_count(true, 4242).unwrap(), 4242);
        c.send_u64s(&[7, u64::MAX]).unwrap();
        assert_eq!(
            t.join().unwrap(),
            (b"12345678".to_vec(), 4242, [7, u64::MAX])
        );
    }

    #[test]
    fn watch_notices_a_closed_connection() {
        let l = TcpListener::bind(localhost(0, false)).unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let ctrl = Ctrl::new(Stream::Tcp(c));
        let w = ctrl
            .watch(None, None, Some(Duration::from_secs(5)))
            .unwrap();
        w.last.set(Instant::now() - WATCH_PERIOD);
        assert!(w.check().is_ok());
        drop(s);
        w.last.set(Instant::now() - WATCH_PERIOD);
        assert_eq!(w.check().unwrap_err().code, Error::ConnAborted.code());
        // Idle past the timeout: the first check starts the stretch, a later one ends it.
        let w = Watch {
            timeout: Some(Duration::from_millis(1)),
            ..Watch::flag(Arc::new(AtomicBool::new(false)))
        };
        w.last.set(Instant::now() - WATCH_PERIOD);
        assert!(w.check().is_ok());
        w.idle_since
            .set(Some(Instant::now() - Duration::from_millis(5)));
        w.last.set(Instant::now() - WATCH_PERIOD);
        assert_eq!(w.check().unwrap_err().code, Error::TimedOut.code());
        w.busy();
        w.last.set(Instant::now() - WATCH_PERIOD);
        assert!(w.check().is_ok());
        let stop = Arc::new(AtomicBool::new(true));
        assert_eq!(
            Watch::flag(stop).idle().unwrap_err().code,
            Error::Canceled.code()
        );
    }

    #[test]
    fn watch_checks_only_once_a_wait_is_long() {
        let l = TcpListener::bind(localhost(0, false)).unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let w = Ctrl::new(Stream::Tcp(c)).watch(None, None, None).unwrap();
        drop(s);
        // Waits shorter than a check's worth of polls, each ended by a completion, never
        // look at the (closed) connection, however many of them there are.
        for _ in 0..3 {
            w.last.set(Instant::now() - WATCH_PERIOD);
            for _ in 1..POLLS_PER_CHECK {
                assert!(w.idle().is_ok());
            }
            w.busy();
        }
        // A wait that lasts that long does.
        w.last.set(Instant::now() - WATCH_PERIOD);
        for _ in 1..POLLS_PER_CHECK {
            assert!(w.idle().is_ok());
        }
        assert_eq!(w.idle().unwrap_err().code, Error::ConnAborted.code());
    }

    #[test]
    fn integrity_pattern_matches_pp_fill_buf() {
        let mut b = [0u8; 70];
        fill(&mut b, 0);
        assert_eq!(&b[..4], b"0123");
        assert_eq!(b[62], b'0');
        fill(&mut b, 1);
        assert_eq!(&b[..3], b"789");
        assert_eq!(check(&b, 1), None);
        b[5] ^= 1;
        assert_eq!(check(&b, 1), Some(5));
        assert_eq!(check(&b, 2), Some(0));
    }

    #[test]
    fn sizes_and_formatting() {
        assert_eq!(parse_size("4k").unwrap(), Sizes::One(4096));
        assert_eq!(parse_size("ALL").unwrap(), Sizes::All);
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999999999999g").is_err());
        assert_eq!(test_sizes(Sizes::All, 13), vec![0, 1, 2, 3, 4, 6, 8, 12]);
        assert_eq!(test_sizes(Sizes::Default, 4096), vec![64, 256, 1024, 4096]);
        assert_eq!(size_str(1280), "1.2k");
        assert_eq!(cnt_str(2_500_000), "2m");
        assert_eq!(
            Bw::header(),
            "bytes   iters   total       time     MB/sec    usec/xfer   Mxfers/sec"
        );
        let b = Bw {
            size: 64,
            iters: 1000,
            window: 64,
            elapsed: Duration::from_millis(1),
        };
        assert_eq!(
            b.line(),
            "64      1k      62k         0.00s     64.00       1.00       1.00"
        );
        assert_eq!(b.per_sec(), 1e6);
    }
}
