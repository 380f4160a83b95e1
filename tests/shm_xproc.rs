//! The conformance features of the shm provider with the two endpoints in two real
//! processes, across the configuration matrix.
//!
//! Every scenario is one generic body (written against `common::Api`, the abstraction of
//! the conformance suites) with two sides: `P`, run by the test itself, and `C`, run by a
//! child process that re-runs this test binary as `child_entry` (the harness of
//! `tests/shm_child`). The sides talk in lines: they exchange endpoint names, tell each
//! other when buffers are posted or messages sent, and report what they observed, and
//! each side asserts what it can see itself (its completions, counters and memory) and
//! what the other reports. A failure on the child's side is sent to the parent as a line
//! (by a panic hook) and ends the child; the parent fails with it at its next line (or
//! at `Kid::finish`). Every wait is bounded.
//!
//! [`matrix!`] instantiates each scenario for the stacks it runs on: one module per stack
//! (threading level, progress model, AV type, CQ format, the run-time dispatch layer),
//! one `#[test]` per scenario. A stack with an environment (`bounce`: `FABRIC_SHM_CMA=0`)
//! runs both sides in children with that environment, the test relaying their lines,
//! since the provider reads the environment once per process.

mod shm_child;

/// The provider under test, as the shared conformance scaffolding names it.
type Prov = fabric_shm::Shm;

#[path = "suite/common.rs"]
#[macro_use]
mod common;

use std::collections::HashSet;
use std::sync::mpsc::TryRecvError;
use std::time::{Duration, Instant};

use common::*;
use fabric::atomic::AtomicClass;
use fabric::dynamic::prelude::*;
use fabric::prelude::*;
use shm_child::{hex, unhex, Ctl, Kid, ROLE, STACK};

/// How a side reports its own failure to the other (the panic message follows).
const FAIL: &str = "FAIL ";

/// Longest one side waits for a line from the other.
const LINE_DEADLINE: Duration = Duration::from_secs(20);
/// Longest a relayed scenario (both sides in children) may take.
const RELAY_DEADLINE: Duration = Duration::from_secs(60);

const ANY: FiAddr = FiAddr::UNSPEC;
const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

// ---------------------------------------------------------------------------------
// The line channel between the two sides
// ---------------------------------------------------------------------------------

/// One end of the line channel between the two sides of a scenario.
trait Link {
    /// Sends one line to the other side.
    fn send(&mut self, line: &str);
    /// The other side's next line, if one has arrived (panics if the other side is gone).
    fn poll(&mut self) -> Option<String>;
}

impl Link for Kid {
    fn send(&mut self, line: &str) {
        self.say(line);
    }
    fn poll(&mut self) -> Option<String> {
        match self.lines.try_recv() {
            Ok(l) => Some(l),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                panic!("the child process ended early: {:?}", wait_exit(self))
            }
        }
    }
}

/// The child's end: the parent (or the relaying test) on stdin/stdout.
struct CtlLink(Ctl);

impl Link for CtlLink {
    fn send(&mut self, line: &str) {
        self.0.report(line);
    }
    fn poll(&mut self) -> Option<String> {
        self.0.try_line()
    }
}

/// How `kid` ended (it closed its stdout, so it is exiting); `None` if it has not
/// within a few seconds.
fn wait_exit(kid: &mut Kid) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match kid.child.try_wait() {
            Ok(Some(st)) => return Some(st),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => return None,
        }
    }
}

/// The next line from `link`, which must start with the word `word`; returns the rest.
/// Drives progress on `drive` while waiting (the other side may depend on it).
fn listen(link: &mut dyn Link, word: &str, drive: &[&dyn DomainOps], auto: bool) -> String {
    let deadline = Instant::now() + LINE_DEADLINE;
    loop {
        if let Some(line) = link.poll() {
            if let Some(why) = line.strip_prefix(FAIL) {
                panic!("the other side failed: {why}");
            }
            let rest = line
                .strip_prefix(word)
                .filter(|r| r.is_empty() || r.starts_with(' '));
            return match rest {
                Some(r) => r.trim().to_string(),
                None => panic!("the other side said {line:?}, expected {word}"),
            };
        }
        for d in drive {
            d.progress();
        }
        assert!(
            Instant::now() < deadline,
            "no {word} from the other side within {LINE_DEADLINE:?}"
        );
        if auto {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            std::thread::yield_now();
        }
    }
}

/// The hexadecimal numbers of a line.
fn nums(s: &str) -> Vec<u64> {
    s.split_whitespace()
        .map(|t| u64::from_str_radix(t, 16).unwrap_or_else(|_| panic!("not a number: {t:?}")))
        .collect()
}

/// Which side of a scenario runs here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// The test process (or, relayed, the first child).
    P,
    /// The child process.
    C,
}

/// One side of a scenario: its node, the other side's address, the line channel.
struct Side<'l, A: Api> {
    role: Role,
    link: &'l mut dyn Link,
    n: Node<A>,
    /// The other side's endpoint in `n`'s AV.
    peer: FiAddr,
    /// The other side's endpoint name.
    peer_name: Vec<u8>,
}

impl<'l, A: Api> Side<'l, A> {
    /// Opens this side's node (its info changed by `tweak`) and exchanges names.
    fn open(role: Role, link: &'l mut dyn Link, tweak: impl FnOnce(&mut Info)) -> Self {
        Self::with_node(role, link, node::<A>(tweak))
    }

    /// Exchanges names for node `n`.
    fn with_node(role: Role, link: &'l mut dyn Link, n: Node<A>) -> Self {
        link.send(&format!("NAME {}", hex(&n.ep.name())));
        let peer_name = unhex(&listen(link, "NAME", &[&n.domain], A::AUTO));
        let peer = n.av.insert(&peer_name).expect("insert the other side");
        Side {
            role,
            link,
            n,
            peer,
            peer_name,
        }
    }

    fn is_p(&self) -> bool {
        self.role == Role::P
    }

    fn say(&mut self, line: &str) {
        self.link.send(line);
    }

    /// The other side's next line (starting with `word`), progressing this side.
    #[track_caller]
    fn hear(&mut self, word: &str) -> String {
        listen(&mut *self.link, word, &[&self.n.domain], A::AUTO)
    }

    /// As [`Side::hear`], progressing `extra` domains too.
    #[track_caller]
    fn hear_also(&mut self, word: &str, extra: &[&dyn DomainOps]) -> String {
        let mut drive: Vec<&dyn DomainOps> = vec![&self.n.domain];
        drive.extend_from_slice(extra);
        listen(&mut *self.link, word, &drive, A::AUTO)
    }

    /// Both sides reach `label`.
    #[track_caller]
    fn sync(&mut self, label: &str) {
        self.say(&format!("SYNC {label}"));
        let got = self.hear("SYNC");
        assert_eq!(got, label, "out of step with the other side");
    }

    /// The next completion, which must be successful.
    #[track_caller]
    fn ok(&self) -> A::Entry {
        wait_ok(&self.n.cq, &[&self.n.domain])
    }

    /// The next error entry.
    #[track_caller]
    fn err(&self) -> CqErrEntry {
        wait_err(&self.n.cq, &[&self.n.domain])
    }

    /// A completion with its source address (`fi_cq_readfrom`).
    #[track_caller]
    fn ok_from(&self) -> (A::Entry, FiAddr) {
        wait_one_from(&self.n.cq, &[&self.n.domain])
            .unwrap_or_else(|e| panic!("expected a completion, got {e:?}"))
    }

    /// Nothing arrives in this side's CQ for a while.
    #[track_caller]
    fn quiet(&self) {
        assert_cq_empty(&self.n.cq, &[&self.n.domain]);
    }

    /// Retries `f` while the provider says `Again`.
    #[track_caller]
    fn retry<T>(&self, f: impl FnMut() -> fabric::Result<T>) -> T {
        retry(&[&self.n.domain], f)
    }

    /// Waits for this side's counter `c` to reach `v`.
    #[track_caller]
    fn cntr_at_least(&self, c: &A::Cntr, v: u64) {
        wait_cntr(c, v, &[&self.n.domain]);
    }

    /// Successful completions until each of `ctxs` has been seen once (any order);
    /// returns the entries in CQ order.
    #[track_caller]
    fn collect(&self, ctxs: &[usize]) -> Vec<A::Entry> {
        let mut want: HashSet<usize> = ctxs.iter().copied().collect();
        let mut got = Vec::new();
        while !want.is_empty() {
            let e = self.ok();
            assert!(
                want.remove(&e.context().0),
                "unexpected completion {e:?} (waiting for {want:?})"
            );
            got.push(e);
        }
        got
    }

    /// The end of a scenario: both sides are done with each other.
    fn finish(&mut self) {
        self.sync("FIN");
    }
}

// ---------------------------------------------------------------------------------
// Running scenarios
// ---------------------------------------------------------------------------------

/// One side of a scenario on one API.
type Body = fn(Role, &mut dyn Link);

/// Runs scenario `scen` on `stack`: with no environment the test is side `P` and a
/// child side `C`; with one, both sides run in children with it and the test relays.
fn drive(stack: &str, scen: &str, env: &[(&str, &str)], body: Body) {
    let t0 = Instant::now();
    if env.is_empty() {
        let mut kid = Kid::spawn(&format!("C:{scen}"), stack, env);
        body(Role::P, &mut kid);
        kid.finish();
    } else {
        let mut p = Kid::spawn(&format!("P:{scen}"), stack, env);
        let mut c = Kid::spawn(&format!("C:{scen}"), stack, env);
        relay(&mut p, &mut c);
        p.finish();
        c.finish();
    }
    eprintln!("{stack}::{scen} took {:?}", t0.elapsed());
}

/// Forwards lines between two children until both are done; fails as soon as one fails.
fn relay(a: &mut Kid, b: &mut Kid) {
    let deadline = Instant::now() + RELAY_DEADLINE;
    let mut open = [true, true];
    while open[0] || open[1] {
        let moved = pump(a, b, &mut open[0]) | pump(b, a, &mut open[1]);
        if !moved {
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(
            Instant::now() < deadline,
            "relayed scenario still running after {RELAY_DEADLINE:?}"
        );
    }
}

/// Moves one line from `from` to `to`; whether one moved.
fn pump(from: &mut Kid, to: &mut Kid, open: &mut bool) -> bool {
    if !*open {
        return false;
    }
    match from.lines.try_recv() {
        Ok(l) => {
            if let Some(why) = l.strip_prefix(FAIL) {
                panic!("a side failed: {why}");
            }
            if matches!(to.child.try_wait(), Ok(None)) {
                to.say(&l);
            }
            true
        }
        Err(TryRecvError::Empty) => false,
        Err(TryRecvError::Disconnected) => {
            *open = false;
            match wait_exit(from) {
                Some(st) if st.success() => false,
                st => panic!("a side failed: {st:?}"),
            }
        }
    }
}

/// Instantiates scenarios per stack: module `$m` with one `#[test]` per listed scenario
/// (each a generic `fn name<A: Api>(Role, &mut dyn Link)` at the crate root), and the
/// child-side dispatch by stack and scenario name.
macro_rules! matrix {
    ($($m:ident: $api:ty $(, env = $env:expr)? => [$($(#[$a:meta])* $t:ident),* $(,)?];)*) => {
        $(
            mod $m {
                #[allow(unused_imports)]
                use super::*;
                const ENV: &[(&str, &str)] = matrix!(@env $($env)?);
                $(
                    #[test]
                    $(#[$a])*
                    fn $t() {
                        super::drive(stringify!($m), stringify!($t), ENV, super::$t::<$api>);
                    }
                )*
                /// Runs one side of scenario `scen` on this stack.
                pub(super) fn side(scen: &str, role: Role, link: &mut dyn Link) {
                    match scen {
                        $(stringify!($t) => super::$t::<$api>(role, link),)*
                        other => panic!("no scenario {other} on {}", stringify!($m)),
                    }
                }
            }
        )*
        /// The child side: runs `scen` on `stack`.
        fn dispatch(stack: &str, scen: &str, role: Role, link: &mut dyn Link) {
            match stack {
                $(stringify!($m) => $m::side(scen, role, link),)*
                other => panic!("unknown stack {other}"),
            }
        }
    };
    (@env) => { &[] };
    (@env $e:expr) => { $e };
}

/// Entry point of child processes (does nothing unless started as one).
#[test]
#[ignore = "child process of the cross-process tests"]
fn child_entry() {
    let (Ok(role), Ok(stack)) = (std::env::var(ROLE), std::env::var(STACK)) else {
        return;
    };
    let (side, scen) = role.split_once(':').expect("role is SIDE:SCENARIO");
    let side = match side {
        "P" => Role::P,
        "C" => Role::C,
        other => panic!("unknown side {other}"),
    };
    // A failure here is reported to the other side, whose test then fails with it.
    let report = std::panic::take_hook();
    let who = format!(
        "side {side:?} of {stack}::{scen} (pid {})",
        std::process::id()
    );
    std::panic::set_hook(Box::new(move |info| {
        let what = info.to_string().replace('\n', " | ");
        println!("@@ {FAIL}{who}: {what}");
        report(info);
    }));
    if std::env::var("FABRIC_SHM_CMA").is_ok_and(|v| v == "0") {
        assert!(!fabric_shm::cma_enabled(), "FABRIC_SHM_CMA=0 is obeyed");
    }
    let mut link = CtlLink(Ctl::new());
    dispatch(&stack, scen, side, &mut link);
}

// ---------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------

/// Deterministic content, not periodic in any small power of two.
fn pattern(n: usize, seed: u64) -> Vec<u8> {
    (0..n as u64)
        .map(|i| ((i ^ (seed << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
        .collect()
}

/// A cheap digest: every word of the head and tail 64 KiB, plus the length.
fn digest(b: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ b.len() as u64;
    let mut mix = |part: &[u8]| {
        let mut words = part.chunks_exact(8);
        for w in &mut words {
            let mut x = [0u8; 8];
            x.copy_from_slice(w);
            h = (h ^ u64::from_le_bytes(x)).wrapping_mul(0x100_0000_01b3);
        }
        for &x in words.remainder() {
            h = (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3);
        }
    };
    const SPAN: usize = 64 << 10;
    if b.len() <= 2 * SPAN {
        mix(b);
    } else {
        mix(&b[..SPAN]);
        mix(&b[b.len() - SPAN..]);
    }
    h
}

/// A digest of all of `b`, for memory compared across processes.
fn full_digest(b: &[u8]) -> u64 {
    b.chunks(128 << 10)
        .fold(0u64, |h, c| h.rotate_left(7) ^ digest(c))
}

/// The whole region, through the local accessor.
fn snapshot(mr: &dyn MrOps) -> Vec<u8> {
    let mut v = vec![0u8; mr.len()];
    mr.read(0, &mut v).expect("MemoryRegion::read");
    v
}

fn mr_attr(access: MrAccess, key: u64) -> MrAttr {
    MrAttr {
        access,
        offset: 0,
        requested_key: key,
        context: 0,
    }
}

/// A tagged receive with no buffer: `FI_PEEK`, `FI_CLAIM`, `FI_DISCARD` combinations.
fn peek<A: Api>(s: &Side<A>, tag: u64, ctx: usize, flags: OpFlags) -> fabric::Result<()> {
    let mut none: [&mut [u8]; 0] = [];
    let mut m = TaggedMsgMut {
        iov: &mut none,
        addr: ANY,
        tag,
        ignore: 0,
        context: Context(ctx),
    };
    // SAFETY: no buffer is given, so nothing can be written.
    unsafe { s.n.ep.trecvmsg(&mut m, flags) }
}

/// The fields an entry has agree with the CQ's format.
#[track_caller]
fn check_format<E: EntryView>(e: &E, f: CqFormatKind) {
    let has = [
        e.flags().is_some(),
        e.len().is_some(),
        e.buf().is_some(),
        e.data().is_some(),
        e.tag().is_some(),
    ];
    let want = match f {
        CqFormatKind::Context => [false; 5],
        CqFormatKind::Msg => [true, true, false, false, false],
        CqFormatKind::Data => [true, true, true, true, false],
        CqFormatKind::Tagged => [true; 5],
        _ => return,
    };
    assert_eq!(
        has, want,
        "fields (flags, len, buf, data, tag) of an entry of a {f:?} CQ"
    );
}

// ---------------------------------------------------------------------------------
// Messages: every send and receive variant, every size class, both directions
// ---------------------------------------------------------------------------------

/// The sizes of the full data scenario: empty, one byte, the largest one-cell tagged
/// payload and one more, the inject limit, the largest ring payload and one more, and
/// staged payloads through the near file and through cross-memory attach (or the far
/// file).
const SIZES: &[usize] = &[0, 1, 48, 49, 4096, 8192, 8193, 65536, 1 << 20, 4 << 20];

/// Sizes of the shorter data scenario run on every stack: one of each path.
const CORE_SIZES: &[usize] = &[0, 49, 8193, 1 << 20];

/// Extra receive space after each message, checked to stay untouched.
const SLACK: usize = 16;

/// How a message is sent.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tx {
    Send,
    Sendv,
    Senddata,
    Inject,
    Injectdata,
    Msg(OpFlags),
}

/// How it is received.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rx {
    Plain,
    Vector,
    Msg,
}

const VARIANTS: [(Tx, Rx); 9] = [
    (Tx::Send, Rx::Plain),
    (Tx::Sendv, Rx::Vector),
    (Tx::Senddata, Rx::Msg),
    (Tx::Inject, Rx::Plain),
    (Tx::Injectdata, Rx::Vector),
    (
        Tx::Msg(OpFlags::COMPLETION.union(OpFlags::REMOTE_CQ_DATA)),
        Rx::Plain,
    ),
    (Tx::Msg(OpFlags::DELIVERY_COMPLETE), Rx::Msg),
    (Tx::Msg(OpFlags::TRANSMIT_COMPLETE), Rx::Vector),
    (Tx::Msg(OpFlags::INJECT_COMPLETE), Rx::Plain),
];

/// One message of the data scenario.
#[derive(Clone, Copy, Debug)]
struct Item {
    idx: usize,
    tagged: bool,
    tx: Tx,
    rx: Rx,
    /// Index into the size list.
    size_i: usize,
    size: usize,
    /// Whether `P` sends it.
    from_p: bool,
}

impl Item {
    fn tag(&self) -> u64 {
        0x7a90_0000 + self.idx as u64
    }
    fn data(&self) -> u64 {
        0xda7a_0000_0000 + self.idx as u64
    }
    fn has_data(&self) -> bool {
        match self.tx {
            Tx::Senddata | Tx::Injectdata => true,
            Tx::Msg(f) => f.contains(OpFlags::REMOTE_CQ_DATA),
            _ => false,
        }
    }
    fn is_inject(&self) -> bool {
        matches!(self.tx, Tx::Inject | Tx::Injectdata)
    }
    fn delivery(&self) -> bool {
        matches!(self.tx, Tx::Msg(f) if f.contains(OpFlags::DELIVERY_COMPLETE))
    }
    fn kind(&self) -> CqFlags {
        if self.tagged {
            CqFlags::TAGGED
        } else {
            CqFlags::MSG
        }
    }
    /// Send context.
    fn sctx(&self) -> Context {
        Context(1 + self.idx)
    }
    /// Receive context.
    fn rctx(&self) -> Context {
        Context(100_000 + self.idx)
    }
}

/// Every (family, variant, size), injects only up to `inject_size`. Each (variant, size)
/// goes one way untagged and the other way tagged.
fn items(sizes: &[usize], inject_size: usize) -> Vec<Item> {
    let mut v = Vec::new();
    for tagged in [false, true] {
        for (vi, &(tx, rx)) in VARIANTS.iter().enumerate() {
            for (size_i, &size) in sizes.iter().enumerate() {
                if matches!(tx, Tx::Inject | Tx::Injectdata) && size > inject_size {
                    continue;
                }
                v.push(Item {
                    idx: v.len(),
                    tagged,
                    tx,
                    rx,
                    size_i,
                    size,
                    from_p: (vi + size_i + tagged as usize).is_multiple_of(2),
                });
            }
        }
    }
    v
}

/// The content of message `it`: the size's base pattern with the index stamped in front.
fn content(base: &[u8], it: &Item) -> Vec<u8> {
    let mut v = base.to_vec();
    let stamp = (it.idx as u64 | 0x5a00_0000_0000_0000).to_le_bytes();
    let k = v.len().min(8);
    v[..k].copy_from_slice(&stamp[..k]);
    v
}

fn post_send<A: Api>(ep: &A::Ep, it: &Item, buf: &[u8], dest: FiAddr) -> fabric::Result<()> {
    let (ctx, tag, data) = (it.sctx(), it.tag(), it.data());
    let k = buf.len() / 3;
    let iov: [&[u8]; 3] = [&buf[..k], &buf[k..2 * k], &buf[2 * k..]];
    match (it.tx, it.tagged) {
        (Tx::Send, false) => ep.send(buf, dest, ctx),
        (Tx::Send, true) => ep.tsend(buf, dest, tag, ctx),
        (Tx::Sendv, false) => ep.sendv(&iov, dest, ctx),
        (Tx::Sendv, true) => ep.tsendv(&iov, dest, tag, ctx),
        (Tx::Senddata, false) => ep.senddata(buf, data, dest, ctx),
        (Tx::Senddata, true) => ep.tsenddata(buf, data, dest, tag, ctx),
        (Tx::Inject, false) => ep.inject(buf, dest),
        (Tx::Inject, true) => ep.tinject(buf, dest, tag),
        (Tx::Injectdata, false) => ep.injectdata(buf, data, dest),
        (Tx::Injectdata, true) => ep.tinjectdata(buf, data, dest, tag),
        (Tx::Msg(flags), false) => ep.sendmsg(
            &Msg {
                iov: &iov,
                addr: dest,
                context: ctx,
                data,
            },
            flags,
        ),
        (Tx::Msg(flags), true) => ep.tsendmsg(
            &TaggedMsg {
                iov: &iov,
                addr: dest,
                tag,
                context: ctx,
                data,
            },
            flags,
        ),
    }
}

/// Posts the receive of `it` into `buf`.
///
/// # Safety
///
/// `buf` must stay alive, and not be accessed, until the receive completes.
unsafe fn post_recv<A: Api>(
    ep: &A::Ep,
    it: &Item,
    buf: &mut [u8],
    src: FiAddr,
) -> fabric::Result<()> {
    let (ctx, tag) = (it.rctx(), it.tag());
    let k = buf.len() / 2;
    // SAFETY (all arms): the caller keeps `buf` alive and untouched until completion.
    match (it.rx, it.tagged) {
        (Rx::Plain, false) => unsafe { ep.recv(buf, src, ctx) },
        (Rx::Plain, true) => unsafe { ep.trecv(buf, src, tag, 0, ctx) },
        (Rx::Vector, tagged) => {
            let (x, y) = buf.split_at_mut(k);
            let mut iov: [&mut [u8]; 2] = [x, y];
            if tagged {
                // SAFETY: as above.
                unsafe { ep.trecvv(&mut iov, src, tag, 0, ctx) }
            } else {
                // SAFETY: as above.
                unsafe { ep.recvv(&mut iov, src, ctx) }
            }
        }
        (Rx::Msg, false) => {
            let mut iov: [&mut [u8]; 1] = [buf];
            let mut m = MsgMut {
                iov: &mut iov,
                addr: src,
                context: ctx,
            };
            // SAFETY: as above.
            unsafe { ep.recvmsg(&mut m, OpFlags::empty()) }
        }
        (Rx::Msg, true) => {
            let mut iov: [&mut [u8]; 1] = [buf];
            let mut m = TaggedMsgMut {
                iov: &mut iov,
                addr: src,
                tag,
                ignore: 0,
                context: ctx,
            };
            // SAFETY: as above.
            unsafe { ep.trecvmsg(&mut m, OpFlags::empty()) }
        }
    }
}

/// Messages of every size in `sizes` with every send variant (send, sendv, senddata,
/// inject, injectdata, sendmsg with FI_COMPLETION | FI_REMOTE_CQ_DATA,
/// FI_DELIVERY_COMPLETE, FI_TRANSMIT_COMPLETE, FI_INJECT_COMPLETE) and receive variant
/// (recv, recvv, recvmsg; untagged and tagged; from any source and directed), in both
/// directions. The receiver checks every field its CQ format has, the content, that
/// nothing past the message was written, and, for FI_DELIVERY_COMPLETE, that the message
/// was counted before the sender's completion; the sender scribbles over its buffer as
/// soon as the completion (or inject) allows and checks the receiver's report. Counters
/// on both sides end at the number of messages.
fn data_with<A: Api>(role: Role, link: &mut dyn Link, sizes: &[usize]) {
    let max = sizes.iter().copied().max().unwrap_or(0);
    let mut rbuf = vec![0u8; max + SLACK];
    let mut sbuf = vec![0u8; max];
    let bases: Vec<Vec<u8>> = sizes.iter().map(|&n| pattern(n, n as u64 + 1)).collect();
    let mut s = Side::<A>::open(role, link, |_| {});
    let inject_size = s.n.info.tx_attr.inject_size;
    assert_eq!(inject_size, <Prov as fabric::Provider>::INJECT_SIZE);
    let format = s.n.cq.format();
    let (mut sent, mut received) = (0u64, 0u64);
    for it in items(sizes, inject_size) {
        let want = content(&bases[it.size_i], &it);
        let size = it.size;
        if it.from_p == s.is_p() {
            // Sender.
            s.hear(&format!("READY {}", it.idx));
            sbuf[..size].copy_from_slice(&want);
            let (ep, peer) = (&s.n.ep, s.peer);
            s.retry(|| post_send::<A>(ep, &it, &sbuf[..size], peer));
            if !it.is_inject() {
                let e = s.ok();
                check_entry(
                    &e,
                    it.sctx(),
                    CqFlags::SEND | it.kind(),
                    Some(size),
                    None,
                    None,
                );
                check_format(&e, format);
            }
            // The buffer is the application's again: later reads of it must not happen.
            sbuf[..size].fill(0xc3);
            if it.delivery() {
                s.say(&format!("DELIVERED {}", it.idx));
            }
            let r = nums(&s.hear(&format!("OK {}", it.idx)));
            assert_eq!(
                r,
                [size as u64, digest(&want)],
                "receiver's report of {it:?}"
            );
            sent += 1;
        } else {
            // Receiver.
            let rb = &mut rbuf[..size + SLACK];
            rb.fill(0xee);
            // Every third receive names the sender (FI_DIRECTED_RECV).
            let src = if it.idx % 3 == 0 { s.peer } else { ANY };
            let ep = &s.n.ep;
            // SAFETY: `rbuf` outlives the node and is read only after the completion.
            s.retry(|| unsafe { post_recv::<A>(ep, &it, &mut *rb, src) });
            s.say(&format!("READY {}", it.idx));
            if it.delivery() {
                s.hear(&format!("DELIVERED {}", it.idx));
                assert!(
                    s.n.cntr_rx.read() > received,
                    "FI_DELIVERY_COMPLETE reported before the receiver had {it:?}"
                );
            }
            let e = s.ok();
            let mut flags = CqFlags::RECV | it.kind();
            if it.has_data() {
                flags |= CqFlags::REMOTE_CQ_DATA;
            }
            check_entry(
                &e,
                it.rctx(),
                flags,
                Some(size),
                it.tagged.then(|| it.tag()),
                it.has_data().then(|| it.data()),
            );
            check_format(&e, format);
            if let Some(f) = e.flags() {
                assert!(
                    it.has_data() || !f.contains(CqFlags::REMOTE_CQ_DATA),
                    "{e:?}"
                );
                assert!(!f.contains(CqFlags::SEND), "{e:?}");
            }
            if it.rx != Rx::Vector {
                if let Some(b) = e.buf() {
                    assert_eq!(b, rbuf.as_ptr() as usize, "buf of {it:?}");
                }
            }
            assert!(rbuf[..size] == want[..], "content of {it:?}");
            assert!(
                rbuf[size..size + SLACK].iter().all(|&x| x == 0xee),
                "{it:?} wrote past its length"
            );
            received += 1;
            s.say(&format!(
                "OK {} {size:x} {:x}",
                it.idx,
                digest(&rbuf[..size])
            ));
        }
    }
    // Every message counted once, on both sides; nothing else arrived.
    s.cntr_at_least(&s.n.cntr_tx, sent);
    assert_eq!(s.n.cntr_tx.read(), sent, "transmit counter");
    assert_eq!(s.n.cntr_rx.read(), received, "receive counter");
    assert_eq!((s.n.cntr_tx.read_err(), s.n.cntr_rx.read_err()), (0, 0));
    s.quiet();
    s.say(&format!("COUNTS {sent:x} {received:x}"));
    let other = nums(&s.hear("COUNTS"));
    assert_eq!(other, [received, sent], "the other side's counters");
    s.finish();
}

/// [`data_with`] on every size of [`SIZES`].
fn data<A: Api>(role: Role, link: &mut dyn Link) {
    data_with::<A>(role, link, SIZES);
}

/// [`data_with`] on [`CORE_SIZES`].
fn data_core<A: Api>(role: Role, link: &mut dyn Link) {
    data_with::<A>(role, link, CORE_SIZES);
}

// ---------------------------------------------------------------------------------
// Tagged matching: masks, order, peek/claim/discard, directed receive, FI_SOURCE
// ---------------------------------------------------------------------------------

const L1: usize = 1 << 20;
const L2: usize = 100_000;
const L3: usize = 4 << 20;

/// Messages from the other process queued unexpected, then matched: an ignore mask
/// (and a message outside it left alone), same-tag order, a full wildcard taking the
/// oldest, FI_PEEK (FI_ENOMSG on nothing, found twice), FI_PEEK|FI_CLAIM then FI_CLAIM,
/// FI_PEEK|FI_DISCARD and FI_CLAIM|FI_DISCARD on large and small messages, remote CQ
/// data reported by a peek and by the claiming receive. Then a second endpoint of the
/// child: FI_SOURCE reports FI_ADDR_NOTAVAIL before it is in the AV and its AV address
/// after; a receive naming the child's first endpoint does not take the second's message,
/// whether posted before it arrives or after, with an older message of the second
/// endpoint queued ahead (FI_DIRECTED_RECV). Every send completes on the child.
fn matching<A: Api>(role: Role, link: &mut dyn Link) {
    let mut wild = [0u8; 8];
    let mut same = [[0u8; 8]; 3];
    let mut oldest = [0u8; 8];
    let mut claimed = vec![0u8; L1];
    let mut last = [0u8; 8];
    let mut anon = [0u8; 16];
    let mut from1 = [0u8; 16];
    let mut from2 = [0u8; 16];
    let (l1, l2, l3) = (pattern(L1, 0x500), pattern(L2, 0x501), pattern(L3, 0x502));
    let mut s = Side::<A>::open(role, link, |_| {});
    assert!(s.n.info.caps.contains(Caps::DIRECTED_RECV | Caps::SOURCE));
    // Nothing there yet: FI_ENOMSG, on both sides.
    peek(&s, 0x9999, 90, OpFlags::PEEK).unwrap();
    let e = s.err();
    assert_eq!((e.context, e.err), (Context(90), Error::NoMsg));
    s.sync("peeked");
    if s.is_p() {
        s.hear("SENT");
        // A mask: 0xab42 matches 0xab00/0xff, the older 0xac42 does not.
        // SAFETY: the buffers outlive the node and are read after the completions.
        unsafe {
            s.n.ep
                .trecv(&mut wild, ANY, 0xab00, 0xff, Context(10))
                .unwrap()
        };
        let (e, src) = s.ok_from();
        check_entry(
            &e,
            Context(10),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(3),
            Some(0xab42),
            None,
        );
        assert_eq!(src, s.peer, "FI_SOURCE: the sender's AV address");
        assert_eq!(&wild[..3], b"yes");
        // Same tag: in sending order.
        for (i, b) in same.iter_mut().enumerate() {
            // SAFETY: as above.
            unsafe { s.n.ep.trecv(b, ANY, 0x77, 0, Context(11 + i)).unwrap() };
        }
        for (i, len) in [5, 6, 5].into_iter().enumerate() {
            let e = s.ok();
            check_entry(
                &e,
                Context(11 + i),
                CqFlags::RECV | CqFlags::TAGGED,
                Some(len),
                Some(0x77),
                None,
            );
        }
        assert_eq!(same, [*b"first\0\0\0", *b"second\0\0", *b"third\0\0\0"]);
        // A full wildcard takes the oldest message left: 0xac42.
        // SAFETY: as above.
        unsafe {
            s.n.ep
                .trecv(&mut oldest, ANY, 0, u64::MAX, Context(14))
                .unwrap()
        };
        let e = s.ok();
        check_entry(
            &e,
            Context(14),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(2),
            Some(0xac42),
            None,
        );
        assert_eq!(&oldest[..2], b"no");
        // FI_PEEK finds the large message twice and leaves it.
        for ctx in [20, 21] {
            peek(&s, 0x500, ctx, OpFlags::PEEK).unwrap();
            let e = s.ok();
            check_entry(
                &e,
                Context(ctx),
                CqFlags::RECV | CqFlags::TAGGED,
                Some(L1),
                Some(0x500),
                None,
            );
        }
        // FI_PEEK | FI_CLAIM: hidden from others, then received with FI_CLAIM.
        peek(&s, 0x500, 22, OpFlags::PEEK | OpFlags::CLAIM).unwrap();
        let e = s.ok();
        check_entry(
            &e,
            Context(22),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(L1),
            Some(0x500),
            None,
        );
        peek(&s, 0x500, 23, OpFlags::PEEK).unwrap();
        assert_eq!(s.err().err, Error::NoMsg, "a claimed message is hidden");
        {
            let mut iov: [&mut [u8]; 1] = [&mut claimed];
            let mut m = TaggedMsgMut {
                iov: &mut iov,
                addr: ANY,
                tag: 0x500,
                ignore: 0,
                context: Context(22),
            };
            // SAFETY: as above.
            unsafe { s.n.ep.trecvmsg(&mut m, OpFlags::CLAIM).unwrap() };
        }
        let e = s.ok();
        check_entry(
            &e,
            Context(22),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(L1),
            Some(0x500),
            None,
        );
        assert!(claimed == l1, "claimed content");
        assert_eq!(peek(&s, 0x500, 22, OpFlags::CLAIM), Err(Error::NoMsg));
        // FI_PEEK | FI_DISCARD on a large and a small message.
        for (tag, ctx) in [(0x501, 30), (0x503, 32)] {
            peek(&s, tag, ctx, OpFlags::PEEK | OpFlags::DISCARD).unwrap();
            let e = s.ok();
            check_entry(
                &e,
                Context(ctx),
                CqFlags::RECV | CqFlags::TAGGED,
                None,
                Some(tag),
                None,
            );
            peek(&s, tag, ctx + 1, OpFlags::PEEK).unwrap();
            assert_eq!(s.err().err, Error::NoMsg, "discarded {tag:x}");
        }
        // FI_PEEK | FI_CLAIM, then FI_CLAIM | FI_DISCARD, of the 4 MiB message.
        peek(&s, 0x502, 40, OpFlags::PEEK | OpFlags::CLAIM).unwrap();
        let e = s.ok();
        check_entry(
            &e,
            Context(40),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(L3),
            Some(0x502),
            None,
        );
        peek(&s, 0x502, 40, OpFlags::CLAIM | OpFlags::DISCARD).unwrap();
        assert_eq!(s.ok().context(), Context(40));
        peek(&s, 0x502, 41, OpFlags::PEEK).unwrap();
        assert_eq!(s.err().err, Error::NoMsg);
        // A peek reports the remote CQ data; the claimed receive does again.
        let with_data = CqFlags::RECV | CqFlags::TAGGED | CqFlags::REMOTE_CQ_DATA;
        peek(&s, 0x504, 43, OpFlags::PEEK | OpFlags::CLAIM).unwrap();
        let e = s.ok();
        check_entry(
            &e,
            Context(43),
            with_data,
            Some(L2),
            Some(0x504),
            Some(0xda7a),
        );
        {
            let mut iov: [&mut [u8]; 1] = [&mut claimed[..L2]];
            let mut m = TaggedMsgMut {
                iov: &mut iov,
                addr: ANY,
                tag: 0x504,
                ignore: 0,
                context: Context(43),
            };
            // SAFETY: as above.
            unsafe { s.n.ep.trecvmsg(&mut m, OpFlags::CLAIM).unwrap() };
        }
        let e = s.ok();
        check_entry(
            &e,
            Context(43),
            with_data,
            Some(L2),
            Some(0x504),
            Some(0xda7a),
        );
        assert!(claimed[..L2] == l2[..], "claimed content with data");
        // SAFETY: as above.
        unsafe { s.n.ep.trecv(&mut last, ANY, 0x600, 0, Context(42)).unwrap() };
        let e = s.ok();
        check_entry(
            &e,
            Context(42),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(4),
            Some(0x600),
            None,
        );
        assert_eq!(&last[..4], b"last");
        s.quiet();
        s.say("MATCHED");

        // A second endpoint of the child, not yet in the AV: FI_ADDR_NOTAVAIL.
        let name2 = unhex(&s.hear("NAME2"));
        // SAFETY: as above.
        unsafe { s.n.ep.recv(&mut anon, ANY, Context(60)).unwrap() };
        s.say("ANON");
        let (e, src) = s.ok_from();
        assert_eq!(e.context(), Context(60));
        assert_eq!(src, FiAddr::NOTAVAIL, "FI_SOURCE of a sender not in the AV");
        assert_eq!(&anon[..4], b"anon");
        let c2 = s.n.av.insert(&name2).unwrap();
        assert_ne!(c2, s.peer);
        // A receive naming the first endpoint ignores the second's message.
        // SAFETY: as above.
        unsafe { s.n.ep.trecv(&mut from1, s.peer, 1, 0, Context(62)).unwrap() };
        s.say("DIRECTED");
        s.hear("SENT2");
        s.quiet();
        s.say("NOW1");
        let (e, src) = s.ok_from();
        check_entry(
            &e,
            Context(62),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(7),
            Some(1),
            None,
        );
        assert_eq!(src, s.peer);
        assert_eq!(&from1[..7], b"from c1");
        // Queued now: the second endpoint's message, then a newer one of the first; a
        // receive naming the first passes over the older message.
        s.say("AGAIN1");
        s.hear("SENT3");
        from1.fill(0);
        // SAFETY: as above.
        unsafe { s.n.ep.trecv(&mut from1, s.peer, 1, 0, Context(66)).unwrap() };
        let (e, src) = s.ok_from();
        check_entry(
            &e,
            Context(66),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(8),
            Some(1),
            None,
        );
        assert_eq!((src, &from1[..8]), (s.peer, &b"c1 again"[..]));
        // SAFETY: as above.
        unsafe { s.n.ep.trecv(&mut from2, c2, 1, 0, Context(65)).unwrap() };
        let (e, src) = s.ok_from();
        check_entry(
            &e,
            Context(65),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(7),
            Some(1),
            None,
        );
        assert_eq!(src, c2, "FI_SOURCE of the second endpoint");
        assert_eq!(&from2[..7], b"from c2");
        s.quiet();
        s.say("DONE2");
    } else {
        let p = s.peer;
        let sends: [(&[u8], u64); 9] = [
            (b"no", 0xac42),
            (b"yes", 0xab42),
            (b"first", 0x77),
            (b"second", 0x77),
            (b"third", 0x77),
            (&l1, 0x500),
            (&l2, 0x501),
            (&l3, 0x502),
            (b"drop me", 0x503),
        ];
        for (i, (buf, tag)) in sends.iter().enumerate() {
            s.retry(|| s.n.ep.tsend(buf, p, *tag, Context(1 + i)));
        }
        s.retry(|| s.n.ep.tsenddata(&l2, 0xda7a, p, 0x504, Context(11)));
        // Delivery of the last one means the others were taken in (ordered channel).
        let iov: [&[u8]; 1] = [b"last"];
        let m = TaggedMsg {
            iov: &iov,
            addr: p,
            tag: 0x600,
            context: Context(10),
            data: 0,
        };
        s.n.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE).unwrap();
        let mut done: HashSet<usize> = HashSet::new();
        while !done.contains(&10) {
            let e = s.ok();
            check_entry(
                &e,
                e.context(),
                CqFlags::SEND | CqFlags::TAGGED,
                None,
                None,
                None,
            );
            assert!(done.insert(e.context().0));
        }
        s.say("SENT");
        s.hear("MATCHED");
        // Every send completes, the discarded ones too.
        let rest: Vec<usize> = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]
            .into_iter()
            .filter(|c| !done.contains(c))
            .collect();
        s.collect(&rest);
        s.quiet();
        assert_eq!(s.n.cntr_tx.read(), 11);

        let n2 = node::<A>(|_| {});
        let p2 = n2.av.insert(&s.peer_name).unwrap();
        s.say(&format!("NAME2 {}", hex(&n2.ep.name())));
        s.hear_also("ANON", &[&n2.domain]);
        n2.ep.send(b"anon", p2, Context(61)).unwrap();
        let e = wait_ok(&n2.cq, &[&n2.domain, &s.n.domain]);
        assert_eq!(e.context(), Context(61));
        s.hear_also("DIRECTED", &[&n2.domain]);
        let iov: [&[u8]; 1] = [b"from c2"];
        let m = TaggedMsg {
            iov: &iov,
            addr: p2,
            tag: 1,
            context: Context(63),
            data: 0,
        };
        n2.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE).unwrap();
        let e = wait_ok(&n2.cq, &[&n2.domain, &s.n.domain]);
        assert_eq!(e.context(), Context(63));
        s.say("SENT2");
        s.hear_also("NOW1", &[&n2.domain]);
        s.n.ep.tsend(b"from c1", p, 1, Context(64)).unwrap();
        assert_eq!(s.ok().context(), Context(64));
        s.hear_also("AGAIN1", &[&n2.domain]);
        let iov: [&[u8]; 1] = [b"c1 again"];
        let m = TaggedMsg {
            iov: &iov,
            addr: p,
            tag: 1,
            context: Context(67),
            data: 0,
        };
        s.n.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE).unwrap();
        assert_eq!(s.ok().context(), Context(67));
        s.say("SENT3");
        s.hear_also("DONE2", &[&n2.domain]);
        s.quiet();
        assert_cq_empty(&n2.cq, &[&n2.domain]);
    }
    s.finish();
}

/// `fi_sendmsg`, `fi_tsendmsg` and `fi_writemsg` with FI_INJECT: the buffer is the
/// application's again when the call returns (the sender scribbles over it at once and
/// the child still gets the original bytes), and, the endpoint not using selective
/// completion, each still writes a CQ entry (fi_msg(3): `fi_inject` behaves as FI_INJECT
/// *with selective completion and without FI_COMPLETION*; FI_INJECT alone does not
/// suppress the entry).
fn msg_inject_flag<A: Api>(role: Role, link: &mut dyn Link) {
    let mut rbufs = [[0u8; 16]; 2];
    let mut mem = vec![0u8; 16];
    let mut s = Side::<A>::open(role, link, |_| {});
    if s.is_p() {
        let v = nums(&s.hear("READY"));
        let p = s.peer;
        let mut buf = *b"inject flag msg!";
        let iov = [&buf[..]];
        let m = Msg {
            iov: &iov,
            addr: p,
            context: Context(1),
            data: 0,
        };
        s.n.ep.sendmsg(&m, OpFlags::INJECT).unwrap();
        let tm = TaggedMsg {
            iov: &iov,
            addr: p,
            tag: 5,
            context: Context(2),
            data: 0,
        };
        s.n.ep.tsendmsg(&tm, OpFlags::INJECT).unwrap();
        let rm = RmaMsg {
            iov: &iov,
            addr: p,
            rma_iov: RmaIov {
                addr: v[0],
                len: 16,
                key: v[1],
            },
            context: Context(3),
            data: 0,
        };
        s.n.ep.writemsg(&rm, OpFlags::INJECT).unwrap();
        buf.fill(b'#');
        s.say("SENT");
        s.hear("GOT");
        assert_eq!(buf, [b'#'; 16]);
        s.cntr_at_least(&s.n.cntr_tx, 3);
        let mut got = Vec::new();
        let end = Instant::now() + QUIET * 5;
        while Instant::now() < end {
            let mut e = [A::Entry::default(); 1];
            match s.n.cq.read(&mut e) {
                Ok(_) => got.push(e[0].context().0),
                Err(Error::Again) => {
                    s.n.domain.progress();
                }
                Err(e) => panic!("cq read: {e}"),
            }
        }
        got.sort_unstable();
        assert_eq!(
            got,
            [1, 2, 3],
            "CQ entries of sendmsg, tsendmsg, writemsg with FI_INJECT"
        );
    } else {
        let mr = A::mr_reg(&s.n.domain, &mut mem, &mr_attr(RW, 0xa1)).unwrap();
        let [r0, r1] = &mut rbufs;
        // SAFETY: `rbufs` outlives the node; read after the completions.
        unsafe {
            s.n.ep.recv(r0, ANY, Context(10)).unwrap();
            s.n.ep.trecv(r1, ANY, 5, 0, Context(11)).unwrap();
        }
        s.say(&format!("READY {:x} {:x}", mr.remote_addr(), mr.key()));
        s.hear("SENT");
        s.collect(&[10, 11]);
        s.cntr_at_least(&s.n.cntr_rx, 3);
        assert_eq!(rbufs, [*b"inject flag msg!"; 2]);
        assert_eq!(&snapshot(&mr)[..], b"inject flag msg!");
        s.say("GOT");
    }
    s.finish();
}

// ---------------------------------------------------------------------------------
// Multi-receive
// ---------------------------------------------------------------------------------

const MULTI_SIZES: [usize; 5] = [1000, 9000, 12000, 6000, 700];

/// A 32 KiB FI_MULTI_RECV buffer with min_multi_recv 4096 takes five messages from the
/// other process (inline and staged, one with remote CQ data) at consecutive offsets; the
/// fifth leaves less than the minimum and carries FI_MULTI_RECV. The next message goes
/// unexpected to a later receive; tagged multi-receive is refused.
fn multi_recv<A: Api>(role: Role, link: &mut dyn Link) {
    let mut big = vec![0u8; 32 << 10];
    let mut after = [0u8; 8];
    let mut s = Side::<A>::open(role, link, |_| {});
    if s.is_p() {
        s.n.ep.setopt(EpOpt::MinMultiRecv(4096)).unwrap();
        assert_eq!(
            s.n.ep.getopt(EpOptName::MinMultiRecv).unwrap(),
            EpOpt::MinMultiRecv(4096)
        );
        let base = big.as_ptr() as usize;
        {
            let mut iov: [&mut [u8]; 1] = [&mut big];
            let mut m = MsgMut {
                iov: &mut iov,
                addr: ANY,
                context: Context(77),
            };
            // SAFETY: `big` outlives the node; it is read after the buffer is released.
            unsafe { s.n.ep.recvmsg(&mut m, OpFlags::MULTI_RECV).unwrap() };
        }
        s.say("READY");
        s.hear("SENT");
        let mut off = 0;
        let mut seen = 0usize;
        for (i, &n) in MULTI_SIZES.iter().enumerate() {
            let (e, src) = s.ok_from();
            let data = (i == 3).then_some(0xd00d);
            let mut flags = CqFlags::RECV | CqFlags::MSG;
            if data.is_some() {
                flags |= CqFlags::REMOTE_CQ_DATA;
            }
            check_entry(&e, Context(77), flags, Some(n), None, data);
            assert_eq!(src, s.peer);
            if let Some(f) = e.flags() {
                assert_eq!(
                    f.contains(CqFlags::MULTI_RECV),
                    i == MULTI_SIZES.len() - 1,
                    "FI_MULTI_RECV only when the buffer is released (entry {i}: {f:?})"
                );
            }
            if let Some(b) = e.buf() {
                assert_eq!(b, base + off, "entry {i} points into the buffer");
            }
            off += n;
            seen += 1;
        }
        assert_eq!(seen, MULTI_SIZES.len());
        let mut off = 0;
        for (i, &n) in MULTI_SIZES.iter().enumerate() {
            assert!(big[off..off + n] == pattern(n, i as u64), "message {i}");
            off += n;
        }
        assert!(big[off..].iter().all(|&x| x == 0));
        // Released: nothing posted, the sixth message waited unexpected.
        assert_eq!(s.n.ep.cancel(Context(77)), Err(Error::NoEnt));
        // SAFETY: `after` outlives the node; read after the completion.
        unsafe { s.n.ep.recv(&mut after, ANY, Context(78)).unwrap() };
        let e = s.ok();
        check_entry(
            &e,
            Context(78),
            CqFlags::RECV | CqFlags::MSG,
            Some(5),
            None,
            None,
        );
        assert_eq!(&after[..5], b"after");
        assert_eq!(s.n.cntr_rx.read(), 6);
        let mut t = [0u8; 4];
        let mut iov: [&mut [u8]; 1] = [&mut t];
        let mut tm = TaggedMsgMut {
            iov: &mut iov,
            addr: ANY,
            tag: 0,
            ignore: 0,
            context: Context(79),
        };
        // SAFETY: refused, so nothing is posted.
        let r = unsafe { s.n.ep.trecvmsg(&mut tm, OpFlags::MULTI_RECV) };
        assert_eq!(r, Err(Error::BadFlags));
        s.quiet();
        s.say("DONE");
    } else {
        s.hear("READY");
        let p = s.peer;
        let bufs: Vec<Vec<u8>> = MULTI_SIZES
            .iter()
            .enumerate()
            .map(|(i, &n)| pattern(n, i as u64))
            .collect();
        for (i, b) in bufs.iter().enumerate() {
            if i == 3 {
                s.retry(|| s.n.ep.senddata(b, 0xd00d, p, Context(1 + i)));
            } else {
                s.retry(|| s.n.ep.send(b, p, Context(1 + i)));
            }
        }
        s.retry(|| s.n.ep.send(b"after", p, Context(6)));
        for e in s.collect(&[1, 2, 3, 4, 5, 6]) {
            let n = [1000, 9000, 12000, 6000, 700, 5][e.context().0 - 1];
            check_entry(
                &e,
                e.context(),
                CqFlags::SEND | CqFlags::MSG,
                Some(n),
                None,
                None,
            );
        }
        s.say("SENT");
        s.hear("DONE");
        s.quiet();
        assert_eq!(s.n.cntr_tx.read(), 6);
    }
    s.finish();
}

// ---------------------------------------------------------------------------------
// Cancel, unexpected messages, truncation
// ---------------------------------------------------------------------------------

/// Receives canceled while the peer runs in another process complete with FI_ECANCELED
/// (and the right flags) and never take a later message; messages sent before any
/// receive (small, 1 MiB, 4 MiB, with data) wait unexpected and are taken in order by
/// receives posted afterwards; every send completes.
fn cancel_unexpected<A: Api>(role: Role, link: &mut dyn Link) {
    let mut buf = [0u8; 8];
    let mut tbuf = [0u8; 8];
    let mut r1 = [0u8; 16];
    let mut r2 = vec![0u8; L1];
    let mut r3 = [0u8; 16];
    let mut t1 = [0u8; 16];
    let mut t2 = vec![0u8; L3];
    let mut t3 = [0u8; 16];
    let (m2, tt2) = (pattern(L1, 2), pattern(L3, 3));
    let mut s = Side::<A>::open(role, link, |_| {});
    if s.is_p() {
        // SAFETY: the buffers outlive the node; they are checked after cancellation.
        unsafe {
            s.n.ep.recv(&mut buf, ANY, Context(5)).unwrap();
            s.n.ep.trecv(&mut tbuf, ANY, 1, 0, Context(6)).unwrap();
        }
        s.n.ep.cancel(Context(5)).unwrap();
        let e = s.err();
        assert_eq!((e.context, e.err), (Context(5), Error::Canceled));
        assert!(e.flags.contains(CqFlags::RECV | CqFlags::MSG), "{e:?}");
        s.n.ep.cancel(Context(6)).unwrap();
        let e = s.err();
        assert_eq!((e.context, e.err), (Context(6), Error::Canceled));
        assert!(e.flags.contains(CqFlags::RECV | CqFlags::TAGGED), "{e:?}");
        assert_eq!(s.n.ep.cancel(Context(5)), Err(Error::NoEnt));
        assert_eq!(s.n.ep.cancel(Context(999)), Err(Error::NoEnt));
        s.say("CANCELED");
        s.hear("SENT");
        s.quiet();
        assert_eq!(
            (buf, tbuf),
            ([0; 8], [0; 8]),
            "canceled receives stay untouched"
        );
        // SAFETY: the buffers outlive the node; read after the completions.
        unsafe {
            s.n.ep.recv(&mut r1, ANY, Context(10)).unwrap();
            s.n.ep.recv(&mut r2, ANY, Context(11)).unwrap();
            s.n.ep.recv(&mut r3, ANY, Context(12)).unwrap();
        }
        for (ctx, len) in [(10, 4), (11, L1), (12, 3)] {
            let e = s.ok();
            check_entry(
                &e,
                Context(ctx),
                CqFlags::RECV | CqFlags::MSG,
                Some(len),
                None,
                None,
            );
        }
        assert_eq!(&r1[..4], b"late");
        assert!(r2 == m2, "1 MiB unexpected message");
        assert_eq!(&r3[..3], b"fin");
        // Tagged, posted in another order than sent.
        // SAFETY: as above.
        unsafe {
            s.n.ep.trecv(&mut t2, ANY, 2, 0, Context(13)).unwrap();
            s.n.ep.trecv(&mut t3, ANY, 3, 0, Context(14)).unwrap();
            s.n.ep.trecv(&mut t1, ANY, 1, 0, Context(15)).unwrap();
        }
        let got = s.collect(&[13, 14, 15]);
        for e in &got {
            let (len, tag, data) = match e.context().0 {
                13 => (L3, 2, None),
                14 => (1, 3, Some(0x33)),
                _ => (6, 1, None),
            };
            let mut flags = CqFlags::RECV | CqFlags::TAGGED;
            if data.is_some() {
                flags |= CqFlags::REMOTE_CQ_DATA;
            }
            check_entry(e, e.context(), flags, Some(len), Some(tag), data);
        }
        assert!(t2 == tt2, "4 MiB unexpected message");
        assert_eq!((&t1[..6], &t3[..1]), (&b"t-late"[..], &b"d"[..]));
        assert_eq!(s.n.cntr_rx.read(), 6);
        s.quiet();
        s.say("GOT");
    } else {
        s.hear("CANCELED");
        let p = s.peer;
        s.retry(|| s.n.ep.send(b"late", p, Context(1)));
        s.retry(|| s.n.ep.tsend(b"t-late", p, 1, Context(2)));
        s.retry(|| s.n.ep.send(&m2, p, Context(3)));
        s.retry(|| s.n.ep.tsend(&tt2, p, 2, Context(4)));
        s.retry(|| s.n.ep.tsenddata(b"d", 0x33, p, 3, Context(5)));
        let iov: [&[u8]; 1] = [b"fin"];
        let m = Msg {
            iov: &iov,
            addr: p,
            context: Context(6),
            data: 0,
        };
        s.n.ep.sendmsg(&m, OpFlags::DELIVERY_COMPLETE).unwrap();
        let mut done = HashSet::new();
        while !done.contains(&6) {
            assert!(done.insert(s.ok().context().0));
        }
        s.say("SENT");
        s.hear("GOT");
        let rest: Vec<usize> = (1..=5).filter(|c| !done.contains(c)).collect();
        s.collect(&rest);
        s.quiet();
        assert_eq!(s.n.cntr_tx.read(), 6);
    }
    s.finish();
}

/// Receives smaller than the message from the other process complete with FI_ETRUNC
/// error entries: `len` is what was placed, `olen` what was cut, the placed bytes are
/// the message's first ones, the tag and the source are reported; inline (10 and 5
/// bytes), ring-sized (8193 into 8192), staged (1 MiB into 1000) and a 1 MiB message
/// that waited unexpected. The sends complete successfully.
fn truncation<A: Api>(role: Role, link: &mut dyn Link) {
    let mut small = [0u8; 4];
    let mut tsmall = [0u8; 2];
    let mut k1 = vec![0u8; 1000];
    let mut k8 = vec![0u8; 8192];
    let mut late = vec![0u8; 500];
    let (big, edge) = (pattern(L1, 7), pattern(8193, 8));
    let mut s = Side::<A>::open(role, link, |_| {});
    if s.is_p() {
        // SAFETY: the buffers outlive the node; read after the error entries.
        unsafe {
            s.n.ep.recv(&mut small, ANY, Context(8)).unwrap();
            s.n.ep.trecv(&mut tsmall, ANY, 6, 0, Context(9)).unwrap();
            s.n.ep.trecv(&mut k1, ANY, 7, 0, Context(10)).unwrap();
            s.n.ep.trecv(&mut k8, ANY, 8, 0, Context(11)).unwrap();
        }
        s.say("READY");
        let mut seen = HashSet::new();
        for _ in 0..4 {
            let e = s.err();
            assert_eq!(e.err, Error::Trunc, "{e:?}");
            assert!(seen.insert(e.context.0), "{e:?}");
            let (len, olen, tag) = match e.context.0 {
                8 => (4, 6, None),
                9 => (2, 3, Some(6)),
                10 => (1000, L1 - 1000, Some(7)),
                11 => (8192, 1, Some(8)),
                other => panic!("unexpected error entry for context {other}"),
            };
            assert_eq!((e.len, e.olen), (len, olen), "{e:?}");
            assert_eq!(e.src, s.peer, "FI_SOURCE of an error entry");
            let kind = if tag.is_some() {
                CqFlags::TAGGED
            } else {
                CqFlags::MSG
            };
            assert!(e.flags.contains(CqFlags::RECV | kind), "{e:?}");
            if let Some(t) = tag {
                assert_eq!(e.tag, t);
            }
        }
        assert_eq!(&small, b"0123");
        assert_eq!(&tsmall, b"ab");
        assert!(k1[..] == big[..1000]);
        assert!(k8[..] == edge[..8192]);
        assert_eq!(s.n.cntr_rx.read_err(), 4);
        assert_eq!(s.n.cntr_rx.read(), 0);
        s.quiet();
        // A large message that waited unexpected, then a short receive.
        s.say("MORE");
        s.hear("SENT");
        // SAFETY: `late` outlives the node; read after the error entry.
        unsafe { s.n.ep.trecv(&mut late, ANY, 9, 0, Context(12)).unwrap() };
        let e = s.err();
        assert_eq!(
            (e.context, e.err, e.len, e.olen, e.tag),
            (Context(12), Error::Trunc, 500, L1 - 500, 9)
        );
        assert!(late[..] == big[..500]);
        assert_eq!(s.n.cntr_rx.read_err(), 5);
        s.quiet();
        s.say("DONE");
    } else {
        s.hear("READY");
        let p = s.peer;
        s.retry(|| s.n.ep.send(b"0123456789", p, Context(1)));
        s.retry(|| s.n.ep.tsend(b"abcde", p, 6, Context(2)));
        s.retry(|| s.n.ep.tsend(&big, p, 7, Context(3)));
        s.retry(|| s.n.ep.tsend(&edge, p, 8, Context(4)));
        // The sender is not told about the receiver's truncation.
        s.collect(&[1, 2, 3, 4]);
        s.hear("MORE");
        let iov: [&[u8]; 1] = [&big];
        let m = TaggedMsg {
            iov: &iov,
            addr: p,
            tag: 9,
            context: Context(5),
            data: 0,
        };
        s.n.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE).unwrap();
        assert_eq!(s.ok().context(), Context(5));
        s.say("SENT");
        s.hear("DONE");
        assert_eq!((s.n.cntr_tx.read(), s.n.cntr_tx.read_err()), (5, 0));
        s.quiet();
    }
    s.finish();
}

// ---------------------------------------------------------------------------------
// RMA
// ---------------------------------------------------------------------------------

/// The read-write region of the RMA scenario: 4 MiB + 64 KiB.
const RMA_LEN: usize = (4 << 20) + (64 << 10);
const RO_LEN: usize = 4096;

/// Counters of the RMA scenario, one per event kind, so that each is seen on its own.
struct RmaCntrs<A: Api> {
    /// Bound `FI_WRITE`.
    write: A::Cntr,
    /// Bound `FI_READ`.
    read: A::Cntr,
    /// Bound `FI_REMOTE_WRITE`.
    rwrite: A::Cntr,
    /// Bound `FI_REMOTE_READ`.
    rread: A::Cntr,
    /// Bound to the read-write region with `FI_REMOTE_WRITE | FI_REMOTE_READ`.
    mr: A::Cntr,
}

impl<A: Api> RmaCntrs<A> {
    /// The target-side values: remote write, remote read, region, receive.
    fn target(&self, n: &Node<A>) -> [u64; 4] {
        [
            self.rwrite.read(),
            self.rread.read(),
            self.mr.read(),
            n.cntr_rx.read(),
        ]
    }
}

/// A node whose endpoint counts each event kind on its own counter: `cntr_tx` only
/// `FI_TRANSMIT`, `cntr_rx` only `FI_RECV`, and the four RMA kinds apart.
fn rma_node<A: Api>() -> (Node<A>, RmaCntrs<A>) {
    let info = rdm_info::<A>();
    let fabric = A::fabric(&info).expect("fi_fabric");
    let domain = A::domain(&fabric, &info).expect("fi_domain");
    let cq = A::cq(&domain, &NODE_CQ_ATTR).expect("fi_cq_open");
    let av = A::av(&domain, &AvAttr::DEFAULT).expect("fi_av_open");
    let cntr = || A::cntr(&domain, &CntrAttr::DEFAULT).expect("fi_cntr_open");
    let (cntr_tx, cntr_rx) = (cntr(), cntr());
    let c = RmaCntrs {
        write: cntr(),
        read: cntr(),
        rwrite: cntr(),
        rread: cntr(),
        mr: cntr(),
    };
    let ep = A::endpoint(&domain, &info).expect("fi_endpoint");
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    for (k, f) in [
        (&cntr_tx, BindFlags::TRANSMIT),
        (&cntr_rx, BindFlags::RECV),
        (&c.write, BindFlags::WRITE),
        (&c.read, BindFlags::READ),
        (&c.rwrite, BindFlags::REMOTE_WRITE),
        (&c.rread, BindFlags::REMOTE_READ),
    ] {
        ep.bind_cntr(k, f).expect("bind counter");
    }
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    let n = Node {
        fabric,
        domain,
        cq,
        av,
        ep,
        cntr_tx,
        cntr_rx,
        info,
        eq: None,
        pep: None,
    };
    (n, c)
}

/// RMA one way, then the other: every write and read variant (write, writev, writemsg,
/// inject_write, writedata, inject_writedata, writemsg with FI_REMOTE_CQ_DATA, read,
/// readv, readmsg) at sizes from 1 byte to 4 MiB into a region registered with an
/// application key and a non-zero offset; initiator completions; the target's remote CQ
/// data entries and memory (digest against the initiator's model); counters bound to
/// FI_WRITE, FI_READ, FI_REMOTE_WRITE, FI_REMOTE_READ (each its own) and to the region
/// count exactly their events on both sides, FI_TRANSMIT / FI_RECV counters none; then a
/// wrong key, out-of-range accesses and a missing permission fail with error entries
/// (counted as errors of the initiator's counters), change nothing and count nowhere at
/// the target.
fn rma<A: Api>(role: Role, link: &mut dyn Link) {
    let mut rb = vec![0u8; RMA_LEN];
    let mut rv = (vec![0u8; 3], vec![0u8; 700_000]);
    let mut mem = vec![0u8; RMA_LEN];
    let mut ro = pattern(RO_LEN, 0x70);
    let (n, c) = rma_node::<A>();
    let mut s = Side::<A>::with_node(role, link, n);
    let key = if s.is_p() { 0x5150 } else { 0x5151 };
    let attr = MrAttr {
        offset: 0x10_0000,
        ..mr_attr(RW, key)
    };
    let mr = A::mr_reg(&s.n.domain, &mut mem, &attr).expect("mr_reg");
    assert_eq!(
        (mr.key(), mr.remote_addr(), mr.len()),
        (key, 0x10_0000, RMA_LEN)
    );
    let ro_mr = A::mr_reg(
        &s.n.domain,
        &mut ro,
        &mr_attr(MrAccess::REMOTE_READ, key + 0x100),
    )
    .unwrap();
    mr.bind_cntr(&c.mr, BindFlags::REMOTE_WRITE | BindFlags::REMOTE_READ)
        .unwrap();
    s.say(&format!(
        "MR {:x} {:x} {:x} {:x}",
        mr.remote_addr(),
        mr.key(),
        ro_mr.remote_addr(),
        ro_mr.key()
    ));
    let far = nums(&s.hear("MR"));
    let far = Far {
        base: far[0],
        key: far[1],
        ro_base: far[2],
        ro_key: far[3],
    };
    for initiator in [Role::P, Role::C] {
        if s.role == initiator {
            s.sync("go");
            rma_initiate(&mut s, &c, &far, &mut rb, &mut rv);
        } else {
            // The counters before the other side may start.
            let before = c.target(&s.n);
            s.sync("go");
            rma_serve(&mut s, &c, &mr, &ro_mr, before);
        }
    }
    // Nothing was sent or received.
    assert_eq!((s.n.cntr_tx.read(), s.n.cntr_rx.read()), (0, 0));
    s.finish();
}

/// The other side's regions.
struct Far {
    base: u64,
    key: u64,
    ro_base: u64,
    ro_key: u64,
}

/// The data writes of [`rma_initiate`]: (offset, size).
const RMA_WRITES: [(usize, usize); 8] = [
    (0, 1),
    (8, 48),
    (64, 49),
    (128, 4096),
    (8192, 8192),
    (16_384, 8193),
    (65_536, 65_536),
    (1 << 20, 1 << 20),
];

fn rma_initiate<A: Api>(
    s: &mut Side<A>,
    cn: &RmaCntrs<A>,
    far: &Far,
    rb: &mut [u8],
    rv: &mut (Vec<u8>, Vec<u8>),
) {
    let (p, base, key) = (s.peer, far.base, far.key);
    let (w0, r0) = (cn.write.read(), cn.read.read());
    let (we0, re0) = (cn.write.read_err(), cn.read.read_err());
    let mut model = vec![0u8; RMA_LEN];
    let (mut nw, mut nr) = (0u64, 0u64);
    let mut ctx = 0usize;
    let mut next = || {
        ctx += 1;
        Context(ctx)
    };
    let write_done = |s: &Side<A>, c: Context, len: usize| {
        let e = s.ok();
        check_entry(&e, c, CqFlags::RMA | CqFlags::WRITE, Some(len), None, None);
    };
    for (off, size) in RMA_WRITES {
        let d = pattern(size, off as u64);
        let c = next();
        s.retry(|| s.n.ep.write(&d, p, base + off as u64, key, c));
        write_done(s, c, size);
        model[off..off + size].copy_from_slice(&d);
        nw += 1;
    }
    // writev: three small pieces, then two large ones.
    let (a, b, c3) = (pattern(7, 1), pattern(13, 2), pattern(1, 3));
    let c = next();
    s.n.ep
        .writev(&[&a, &b, &c3], p, base + 300, key, c)
        .unwrap();
    write_done(s, c, 21);
    model[300..321].copy_from_slice(&[a, b, c3].concat());
    let (x, y) = (pattern(600_000, 4), pattern(100_001, 5));
    let at = (2 << 20) + 12_345;
    let c = next();
    s.n.ep
        .writev(&[&x, &y], p, base + at as u64, key, c)
        .unwrap();
    write_done(s, c, 700_001);
    model[at..at + 600_000].copy_from_slice(&x);
    model[at + 600_000..at + 700_001].copy_from_slice(&y);
    // writemsg of two pieces.
    let q = pattern(16, 6);
    let iov = [&q[..9], &q[9..]];
    let c = next();
    let m = RmaMsg {
        iov: &iov,
        addr: p,
        rma_iov: RmaIov {
            addr: base + 400,
            len: 16,
            key,
        },
        context: c,
        data: 0,
    };
    s.n.ep.writemsg(&m, OpFlags::empty()).unwrap();
    write_done(s, c, 16);
    model[400..416].copy_from_slice(&q);
    nw += 3;
    // inject_write: no completion, counted.
    let (i1, i2) = (pattern(32, 7), pattern(4096, 8));
    s.retry(|| s.n.ep.inject_write(&i1, p, base + 500, key));
    s.retry(|| s.n.ep.inject_write(&i2, p, base + (3 << 20), key));
    model[500..532].copy_from_slice(&i1);
    model[3 << 20..(3 << 20) + 4096].copy_from_slice(&i2);
    nw += 2;
    // Remote CQ data: writedata (small and 1 MiB), inject_writedata, writemsg.
    let (w1, w2, w3, w4) = (
        pattern(49, 9),
        pattern(1 << 20, 10),
        pattern(6, 11),
        pattern(8, 12),
    );
    let c = next();
    s.n.ep
        .writedata(&w1, 0xfeed_0001, p, base + 600, key, c)
        .unwrap();
    write_done(s, c, 49);
    let w2_at = (3 << 20) + 8192;
    let c = next();
    s.n.ep
        .writedata(&w2, 0xfeed_0002, p, base + w2_at as u64, key, c)
        .unwrap();
    write_done(s, c, 1 << 20);
    s.retry(|| {
        s.n.ep
            .inject_writedata(&w3, 0xfeed_0003, p, base + 700, key)
    });
    let iov = [&w4[..]];
    let c = next();
    let m = RmaMsg {
        iov: &iov,
        addr: p,
        rma_iov: RmaIov {
            addr: base + 720,
            len: 8,
            key,
        },
        context: c,
        data: 0xfeed_0004,
    };
    s.n.ep.writemsg(&m, OpFlags::REMOTE_CQ_DATA).unwrap();
    write_done(s, c, 8);
    model[600..649].copy_from_slice(&w1);
    model[w2_at..w2_at + (1 << 20)].copy_from_slice(&w2);
    model[700..706].copy_from_slice(&w3);
    model[720..728].copy_from_slice(&w4);
    nw += 4;
    // 4 MiB exactly up to the end of the region.
    let whole = pattern(4 << 20, 13);
    let c = next();
    s.n.ep.write(&whole, p, base + (64 << 10), key, c).unwrap();
    write_done(s, c, 4 << 20);
    model[64 << 10..].copy_from_slice(&whole);
    nw += 1;
    // Reads of every written range, and of everything.
    let read_done = |s: &Side<A>, c: Context, len: usize| {
        let e = s.ok();
        check_entry(&e, c, CqFlags::RMA | CqFlags::READ, Some(len), None, None);
    };
    let mut ranges: Vec<(usize, usize)> = RMA_WRITES.to_vec();
    ranges.extend([
        (300, 21),
        (400, 16),
        (500, 32),
        (600, 49),
        (700, 6),
        (720, 8),
    ]);
    ranges.push((0, RMA_LEN));
    for (off, size) in ranges {
        let c = next();
        // SAFETY: `rb` outlives the node (the caller declared it first); read after
        // the completion.
        unsafe { s.n.ep.read(&mut rb[..size], p, base + off as u64, key, c) }.unwrap();
        read_done(s, c, size);
        assert!(
            rb[..size] == model[off..off + size],
            "read of {size} bytes at {off}"
        );
        nr += 1;
    }
    {
        let mut iov: [&mut [u8]; 2] = [&mut rv.0, &mut rv.1];
        let c = next();
        // SAFETY: as above.
        unsafe { s.n.ep.readv(&mut iov, p, base + at as u64, key, c) }.unwrap();
        read_done(s, c, 700_003);
    }
    assert!(rv.0[..] == model[at..at + 3]);
    assert!(rv.1[..] == model[at + 3..at + 700_003]);
    {
        let (z1, z2) = rb[..16].split_at_mut(10);
        let mut iov: [&mut [u8]; 2] = [z1, z2];
        let c = next();
        let mut m = RmaMsgMut {
            iov: &mut iov,
            addr: p,
            rma_iov: RmaIov {
                addr: base + 400,
                len: 16,
                key,
            },
            context: c,
        };
        // SAFETY: as above.
        unsafe { s.n.ep.readmsg(&mut m, OpFlags::empty()) }.unwrap();
        read_done(s, c, 16);
    }
    assert!(rb[..16] == model[400..416]);
    nr += 2;
    // Injected writes count when they complete.
    s.cntr_at_least(&cn.write, w0 + nw);
    assert_eq!(cn.write.read() - w0, nw, "FI_WRITE counter");
    assert_eq!(cn.read.read() - r0, nr, "FI_READ counter");
    assert_eq!((cn.write.read_err(), cn.read.read_err()), (we0, re0));
    s.quiet();
    s.say(&format!("CHECK {nw:x} {nr:x}"));
    let d = nums(&s.hear("DIGEST"));
    assert_eq!(d, [full_digest(&model)], "the target's memory");

    // Errors: wrong key, out of range (small, large, below), no write permission, read
    // past the end of the read-only region; one read of it succeeds.
    let junk = vec![0xeeu8; 20_000];
    let cases: [(&[u8], u64, u64, Error); 6] = [
        (&junk[..8], base, key ^ 0xff, Error::KeyRejected),
        (&junk[..8], base + RMA_LEN as u64 - 7, key, Error::Fault),
        (&junk[..], base + RMA_LEN as u64 - 19_999, key, Error::Fault),
        (&junk[..8], base - 1, key, Error::Fault),
        (&junk[..8], far.ro_base, far.ro_key, Error::Access),
        (&junk[..], far.ro_base, far.ro_key, Error::Access),
    ];
    for (i, (buf, addr, k, want)) in cases.iter().enumerate() {
        let c = Context(1000 + i);
        s.n.ep.write(buf, p, *addr, *k, c).unwrap();
        let e = s.err();
        assert_eq!((e.context, e.err), (c, *want), "bad write {i}: {e:?}");
        assert!(e.flags.contains(CqFlags::RMA | CqFlags::WRITE), "{e:?}");
    }
    let c = Context(1100);
    // SAFETY: as above.
    unsafe { s.n.ep.read(&mut rb[..8], p, base, key ^ 0xff, c) }.unwrap();
    let e = s.err();
    assert_eq!((e.context, e.err), (c, Error::KeyRejected));
    let c = Context(1101);
    // SAFETY: as above.
    unsafe {
        s.n.ep.read(
            &mut rb[..16],
            p,
            far.ro_base + RO_LEN as u64 - 8,
            far.ro_key,
            c,
        )
    }
    .unwrap();
    let e = s.err();
    assert_eq!((e.context, e.err), (c, Error::Fault));
    assert_eq!(cn.write.read_err() - we0, cases.len() as u64);
    assert_eq!(cn.read.read_err() - re0, 2);
    assert_eq!(cn.write.read() - w0, nw, "failed writes are not successes");
    let c = Context(1102);
    // SAFETY: as above.
    unsafe {
        s.n.ep
            .read(&mut rb[..RO_LEN], p, far.ro_base, far.ro_key, c)
    }
    .unwrap();
    read_done(s, c, RO_LEN);
    assert!(rb[..RO_LEN] == pattern(RO_LEN, 0x70)[..]);
    assert_eq!(cn.read.read() - r0, nr + 1);
    s.quiet();
    s.say("CHECK2");
    let d = nums(&s.hear("DIGEST"));
    assert_eq!(d, [full_digest(&model)], "failed accesses changed nothing");
}

fn rma_serve<A: Api>(
    s: &mut Side<A>,
    cn: &RmaCntrs<A>,
    mr: &dyn MrOps,
    ro: &dyn MrOps,
    before: [u64; 4],
) {
    let ro_orig = snapshot(ro);
    let c = nums(&s.hear("CHECK"));
    let (nw, nr) = (c[0], c[1]);
    // Every access counted once, by kind, and by the region's counter. A read is
    // answered before it is counted, so the initiator may be told first.
    s.cntr_at_least(&cn.rread, before[1] + nr);
    let delta = |now: [u64; 4]| -> [u64; 4] { std::array::from_fn(|i| now[i] - before[i]) };
    assert_eq!(
        delta(cn.target(&s.n)),
        [nw, nr, nw + nr, 0],
        "FI_REMOTE_WRITE, FI_REMOTE_READ, region and FI_RECV counters"
    );
    // One target entry per write with remote CQ data, in order.
    let remote = CqFlags::RMA | CqFlags::REMOTE_WRITE | CqFlags::REMOTE_CQ_DATA;
    for (i, len) in [49, 1 << 20, 6, 8].into_iter().enumerate() {
        let e = s.ok();
        check_entry(
            &e,
            Context::NULL,
            remote,
            Some(len),
            None,
            Some(0xfeed_0001 + i as u64),
        );
        check_format(&e, s.n.cq.format());
    }
    s.quiet();
    s.say(&format!("DIGEST {:x}", full_digest(&snapshot(mr))));
    s.hear("CHECK2");
    // Failed accesses count nowhere; the one good read of the read-only region does
    // (not on the read-write region's counter).
    s.cntr_at_least(&cn.rread, before[1] + nr + 1);
    assert_eq!(delta(cn.target(&s.n)), [nw, nr + 1, nw + nr, 0]);
    assert_eq!(
        (cn.rwrite.read_err(), cn.rread.read_err()),
        (0, 0),
        "the target counts no errors for the initiator's failures"
    );
    assert_eq!(snapshot(ro), ro_orig);
    s.quiet();
    s.say(&format!("DIGEST {:x}", full_digest(&snapshot(mr))));
}

/// With FI_MR_PROV_KEY | FI_MR_VIRT_ADDR on both sides the child's regions get unique
/// provider keys and are addressed by virtual address from the parent: writes and
/// reads land where they should, an offset-style address or another region's key is
/// out of range, an unused key is rejected.
fn rma_prov_keys<A: Api>(role: Role, link: &mut dyn Link) {
    let mut out = [0u8; 8];
    let mut bufs: Vec<Vec<u8>> = (0..8).map(|i| vec![i as u8; 4096]).collect();
    let whole = pattern(4096, 0x66);
    let mut s = Side::<A>::open(role, link, |i| {
        i.domain_attr.mr_mode = MrMode::PROV_KEY | MrMode::VIRT_ADDR;
    });
    assert!(s
        .n
        .info
        .domain_attr
        .mr_mode
        .contains(MrMode::PROV_KEY | MrMode::VIRT_ADDR));
    if s.is_p() {
        let v = nums(&s.hear("MRS"));
        let (vas, keys): (Vec<u64>, Vec<u64>) = v.chunks(2).map(|c| (c[0], c[1])).unzip();
        assert_eq!(keys.iter().collect::<HashSet<_>>().len(), 8, "unique keys");
        let p = s.peer;
        s.n.ep
            .write(b"virtual!", p, vas[3] + 4, keys[3], Context(1))
            .unwrap();
        assert_eq!(s.ok().context(), Context(1));
        // SAFETY: `out` outlives the node; read after the completion.
        unsafe { s.n.ep.read(&mut out, p, vas[5] + 24, keys[5], Context(2)) }.unwrap();
        assert_eq!(s.ok().context(), Context(2));
        assert_eq!(out, [5u8; 8]);
        s.n.ep
            .write(&whole, p, vas[6], keys[6], Context(3))
            .unwrap();
        assert_eq!(s.ok().context(), Context(3));
        let unused = (1u64..).find(|k| !keys.contains(k)).unwrap();
        for (c, addr, key, want) in [
            (4, 4, keys[3], Error::Fault),
            (5, vas[3], keys[5], Error::Fault),
            (6, vas[3], unused, Error::KeyRejected),
        ] {
            s.n.ep.write(b"x", p, addr, key, Context(c)).unwrap();
            let e = s.err();
            assert_eq!((e.context, e.err), (Context(c), want));
        }
        s.say("CHECK");
        s.hear("OK");
    } else {
        let mrs: Vec<A::Mr<'_>> = bufs
            .iter_mut()
            .map(|b| A::mr_reg(&s.n.domain, b, &mr_attr(RW, 7)).expect("mr_reg"))
            .collect();
        let keys: HashSet<u64> = mrs.iter().map(|m| m.key()).collect();
        assert_eq!(keys.len(), mrs.len(), "provider keys are unique");
        let line: Vec<String> = mrs
            .iter()
            .map(|m| format!("{:x} {:x}", m.remote_addr(), m.key()))
            .collect();
        s.say(&format!("MRS {}", line.join(" ")));
        s.hear("CHECK");
        for (i, m) in mrs.iter().enumerate() {
            let mut want = vec![i as u8; 4096];
            match i {
                3 => want[4..12].copy_from_slice(b"virtual!"),
                6 => want.copy_from_slice(&whole),
                _ => {}
            }
            assert!(snapshot(m) == want, "region {i}");
        }
        assert_eq!(s.n.cntr_rx.read(), 3);
        s.say("OK");
    }
    s.finish();
}

// ---------------------------------------------------------------------------------
// Atomics
// ---------------------------------------------------------------------------------

/// The classes an op belongs to (fi_atomic(3)).
fn classes_of(op: AtomicOp) -> &'static [AtomicClass] {
    use AtomicOp::*;
    match op {
        Cswap | CswapNe | CswapLe | CswapLt | CswapGe | CswapGt | Mswap => &[AtomicClass::Compare],
        AtomicRead => &[AtomicClass::Fetch],
        _ => &[AtomicClass::Base, AtomicClass::Fetch],
    }
}

/// Whether `op` of `class` accepts `dt` (fi_atomic(3)).
fn spec_valid(class: AtomicClass, op: AtomicOp, dt: Datatype) -> bool {
    use AtomicOp::*;
    classes_of(op).contains(&class)
        && dt.is_supported()
        && match op {
            Min | Max | CswapLe | CswapLt | CswapGe | CswapGt => !dt.is_complex(),
            Bor | Band | Bxor | Mswap => dt.is_integer(),
            _ => true,
        }
}

/// An element type of the local atomic model.
trait Elem: Copy + PartialEq + PartialOrd + std::fmt::Debug {
    const DT: Datatype;
    const ZERO: Self;
    const ONE: Self;
    fn put(self, out: &mut Vec<u8>);
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// `f` on the representations (the bitwise ops; integers only in the spec).
    fn bits(self, o: Self, f: fn(u64, u64) -> u64) -> Self;
}

macro_rules! int_elem {
    ($($t:ty => $dt:ident),*) => {$(
        impl Elem for $t {
            const DT: Datatype = Datatype::$dt;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn bits(self, o: Self, f: fn(u64, u64) -> u64) -> Self {
                f(self as u64, o as u64) as $t
            }
        }
    )*};
}
int_elem!(u8 => Uint8, i32 => Int32, u64 => Uint64);

macro_rules! float_elem {
    ($($t:ty => $dt:ident, $bits:ty),*) => {$(
        impl Elem for $t {
            const DT: Datatype = Datatype::$dt;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn bits(self, o: Self, f: fn(u64, u64) -> u64) -> Self {
                <$t>::from_bits(f(self.to_bits() as u64, o.to_bits() as u64) as $bits)
            }
        }
    )*};
}
float_elem!(f32 => Float, u32, f64 => Double, u64);

fn bytes<T: Elem>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    for x in v {
        x.put(&mut out);
    }
    out
}

/// What `op` leaves in a target holding `a`, with operand `b` and compare `c`.
fn model<T: Elem>(op: AtomicOp, a: T, b: T, c: T) -> T {
    use AtomicOp::*;
    let t = |x: bool| if x { T::ONE } else { T::ZERO };
    let nz = |x: T| x != T::ZERO;
    let swap_if = |x: bool| if x { b } else { a };
    match op {
        Min => swap_if(b < a),
        Max => swap_if(b > a),
        Sum => a.add(b),
        Prod => a.mul(b),
        Lor => t(nz(a) || nz(b)),
        Land => t(nz(a) && nz(b)),
        Lxor => t(nz(a) != nz(b)),
        Bor => a.bits(b, |x, y| x | y),
        Band => a.bits(b, |x, y| x & y),
        Bxor => a.bits(b, |x, y| x ^ y),
        AtomicRead => a,
        AtomicWrite => b,
        Cswap => swap_if(c == a),
        CswapNe => swap_if(c != a),
        CswapLe => swap_if(c <= a),
        CswapLt => swap_if(c < a),
        CswapGe => swap_if(c >= a),
        CswapGt => swap_if(c > a),
        Mswap => b
            .bits(c, |x, y| x & y)
            .bits(a.bits(c, |x, y| x & !y), |x, y| x | y),
    }
}

/// The valid queries of this side's endpoint and domain agree with fi_atomic(3) for the
/// datatypes of the scenario.
fn check_valid_queries<A: Api>(s: &Side<A>) {
    for dt in [
        Datatype::Uint8,
        Datatype::Int32,
        Datatype::Uint64,
        Datatype::Float,
        Datatype::Double,
    ] {
        for op in AtomicOp::ALL {
            for class in AtomicClass::ALL {
                let want = if spec_valid(class, op, dt) {
                    Ok(4096 / dt.size())
                } else {
                    Err(Error::OpNotSupp)
                };
                let got = match class {
                    AtomicClass::Base => s.n.ep.atomicvalid(dt, op),
                    AtomicClass::Fetch => s.n.ep.fetch_atomicvalid(dt, op),
                    AtomicClass::Compare => s.n.ep.compare_atomicvalid(dt, op),
                };
                assert_eq!(got, want, "{class:?} {op:?} {dt:?}");
                assert_eq!(s.n.domain.query_atomic(class, op, dt), want);
            }
        }
    }
}

/// Buffers the initiator's atomics write.
struct AtomicBufs {
    res: Vec<u8>,
    back: Vec<u8>,
}

/// Every valid (class, op) on `T` against the other side's region at `addr`: the target
/// reset by an RMA write, the atomic, the target read back by RMA and compared with the
/// model, the fetched values with the old ones. Returns how many remote accesses it made.
fn atomics_of<A: Api, T: Elem>(
    s: &Side<A>,
    far: (u64, u64),
    b: &mut AtomicBufs,
    vals: [&[T]; 3],
    ctx: &mut usize,
) -> u64 {
    let [t, o, c] = vals;
    let (p, (addr, key)) = (s.peer, far);
    let dt = T::DT;
    let n = t.len() * dt.size();
    let (t0, ob, cb) = (bytes(t), bytes(o), bytes(c));
    let mut accesses = 0;
    for op in AtomicOp::ALL {
        for class in AtomicClass::ALL {
            if !spec_valid(class, op, dt) {
                continue;
            }
            *ctx += 1;
            let cx = Context(*ctx);
            s.n.ep.write(&t0, p, addr, key, cx).unwrap();
            assert_eq!(s.ok().context(), cx);
            let operand: &[u8] = if op == AtomicOp::AtomicRead { &[] } else { &ob };
            let res = &mut b.res[..n];
            res.fill(0xa5);
            let posted = match class {
                AtomicClass::Base => s.n.ep.atomic(operand, dt, op, p, addr, key, cx),
                // SAFETY: `res` belongs to buffers declared before the node; read after
                // the completion below.
                AtomicClass::Fetch => unsafe {
                    s.n.ep.fetch_atomic(operand, res, dt, op, p, addr, key, cx)
                },
                // SAFETY: as above.
                AtomicClass::Compare => unsafe {
                    s.n.ep
                        .compare_atomic(operand, &cb, res, dt, op, p, addr, key, cx)
                },
            };
            posted.unwrap_or_else(|e| panic!("posting {class:?} {op:?} {dt:?}: {e}"));
            let e = s.ok();
            let f = match class {
                AtomicClass::Base => CqFlags::ATOMIC | CqFlags::WRITE,
                _ => CqFlags::ATOMIC | CqFlags::READ,
            };
            check_entry(&e, cx, f, None, None, None);
            // SAFETY: as above.
            unsafe { s.n.ep.read(&mut b.back[..n], p, addr, key, cx) }.unwrap();
            assert_eq!(s.ok().context(), cx);
            let want: Vec<T> = (0..t.len()).map(|i| model(op, t[i], o[i], c[i])).collect();
            assert_eq!(
                b.back[..n],
                bytes(&want)[..],
                "{class:?} {op:?} {dt:?}: target"
            );
            if class != AtomicClass::Base {
                assert_eq!(b.res[..n], t0[..], "{class:?} {op:?} {dt:?}: fetched");
            }
            accesses += 3;
        }
    }
    accesses
}

/// Every op class (base, fetch, compare: sum, prod, min, max, the logical and bitwise
/// ops, read, write, cswap and its variants, mswap) on u8, i32, u64, f32 and f64 against
/// the other process's memory, checked against a local model; the msg and inject forms;
/// invalid combinations refused at post; a read-only region refused at the target. Both
/// sides check the valid queries; the target checks its counter.
fn atomics<A: Api>(role: Role, link: &mut dyn Link) {
    let mut b = AtomicBufs {
        res: vec![0u8; 64],
        back: vec![0u8; 64],
    };
    let mut mem = vec![0u8; 4096];
    let mut ro = pattern(64, 0x31);
    let mut s = Side::<A>::open(role, link, |_| {});
    check_valid_queries(&s);
    if s.is_p() {
        let v = nums(&s.hear("MR"));
        let (p, far, ro_far) = (s.peer, (v[0], v[1]), (v[2], v[3]));
        let mut ctx = 0;
        let mut n = 0;
        n += atomics_of::<A, u8>(
            &s,
            far,
            &mut b,
            [&[5, 200, 0, 7], &[3, 100, 9, 7], &[5, 4, 0, 8]],
            &mut ctx,
        );
        n += atomics_of::<A, i32>(
            &s,
            far,
            &mut b,
            [&[5, -7, 0, i32::MAX], &[3, -7, 9, 1], &[5, 4, -1, i32::MAX]],
            &mut ctx,
        );
        n += atomics_of::<A, u64>(
            &s,
            far,
            &mut b,
            [&[5, 7, 0, u64::MAX], &[3, 7, 9, 1], &[5, 4, 1, u64::MAX]],
            &mut ctx,
        );
        n += atomics_of::<A, f32>(
            &s,
            far,
            &mut b,
            [
                &[1.5, -2.0, 0.0, 3.25],
                &[2.25, -3.0, 4.0, 3.25],
                &[1.5, 1.0, 0.0, 0.5],
            ],
            &mut ctx,
        );
        n += atomics_of::<A, f64>(
            &s,
            far,
            &mut b,
            [
                &[1.5, -2.0, 0.0, 3.25],
                &[2.25, -3.0, 4.0, 3.25],
                &[1.5, 1.0, 0.0, 0.5],
            ],
            &mut ctx,
        );
        // The msg forms and inject_atomic on a u64 at the start of the region.
        let u = Datatype::Uint64;
        s.n.ep
            .write(&10u64.to_ne_bytes(), p, far.0, far.1, Context(9000))
            .unwrap();
        s.ok();
        let five = 5u64.to_ne_bytes();
        let m = AtomicMsg {
            operand: &five,
            addr: p,
            remote_addr: far.0,
            key: far.1,
            datatype: u,
            op: AtomicOp::Sum,
            context: Context(9001),
            data: 0,
        };
        s.n.ep.atomicmsg(&m, OpFlags::empty()).unwrap();
        assert_eq!(s.ok().context(), Context(9001));
        let m = AtomicMsg {
            context: Context(9002),
            ..m
        };
        // SAFETY: `b.res` outlives the node; read after the completion.
        unsafe {
            s.n.ep
                .fetch_atomicmsg(&m, &mut b.res[..8], OpFlags::empty())
        }
        .unwrap();
        assert_eq!(s.ok().context(), Context(9002));
        assert_eq!(b.res[..8], 15u64.to_ne_bytes());
        let m = AtomicMsg {
            op: AtomicOp::Cswap,
            context: Context(9003),
            ..m
        };
        // SAFETY: as above.
        unsafe {
            s.n.ep
                .compare_atomicmsg(&m, &20u64.to_ne_bytes(), &mut b.res[..8], OpFlags::empty())
        }
        .unwrap();
        assert_eq!(s.ok().context(), Context(9003));
        assert_eq!(b.res[..8], 20u64.to_ne_bytes(), "cswap 20 -> 5 fetched 20");
        let tx = s.n.cntr_tx.read();
        s.retry(|| {
            s.n.ep
                .inject_atomic(&five, u, AtomicOp::Sum, p, far.0, far.1)
        });
        s.cntr_at_least(&s.n.cntr_tx, tx + 1);
        // SAFETY: as above.
        unsafe {
            s.n.ep
                .read(&mut b.back[..8], p, far.0, far.1, Context(9004))
        }
        .unwrap();
        s.ok();
        assert_eq!(b.back[..8], 10u64.to_ne_bytes(), "5 + 5 by inject_atomic");
        n += 6;
        // Refused at post: nothing reaches the target.
        let eight = [1u8; 8];
        assert_eq!(
            s.n.ep.atomic(
                &eight,
                Datatype::Double,
                AtomicOp::Bor,
                p,
                far.0,
                far.1,
                Context(1)
            ),
            Err(Error::OpNotSupp)
        );
        assert_eq!(
            s.n.ep
                .inject_atomic(&eight, u, AtomicOp::Cswap, p, far.0, far.1),
            Err(Error::OpNotSupp)
        );
        // A read-only region: FI_EACCES for a sum, a fetch of FI_ATOMIC_READ works.
        s.n.ep
            .atomic(
                &eight,
                u,
                AtomicOp::Sum,
                p,
                ro_far.0,
                ro_far.1,
                Context(9010),
            )
            .unwrap();
        let e = s.err();
        assert_eq!((e.context, e.err), (Context(9010), Error::Access));
        assert!(e.flags.contains(CqFlags::ATOMIC), "{e:?}");
        // SAFETY: as above.
        unsafe {
            s.n.ep.fetch_atomic(
                &[],
                &mut b.res[..8],
                u,
                AtomicOp::AtomicRead,
                p,
                ro_far.0 + 8,
                ro_far.1,
                Context(9011),
            )
        }
        .unwrap();
        assert_eq!(s.ok().context(), Context(9011));
        assert_eq!(b.res[..8], pattern(64, 0x31)[8..16]);
        n += 1;
        s.quiet();
        s.say(&format!("DONE {n:x}"));
        s.hear("OK");
    } else {
        let mr = A::mr_reg(&s.n.domain, &mut mem, &mr_attr(RW, 0x40)).unwrap();
        let ro_mr = A::mr_reg(&s.n.domain, &mut ro, &mr_attr(MrAccess::REMOTE_READ, 0x41)).unwrap();
        s.say(&format!(
            "MR {:x} {:x} {:x} {:x}",
            mr.remote_addr(),
            mr.key(),
            ro_mr.remote_addr(),
            ro_mr.key()
        ));
        let n = nums(&s.hear("DONE"))[0];
        // A read is answered before it is counted: the last ones may still be counting.
        s.cntr_at_least(&s.n.cntr_rx, n);
        assert_eq!(
            s.n.cntr_rx.read(),
            n,
            "one remote access counted per successful write, read and atomic"
        );
        assert_eq!(&snapshot(&mr)[..8], &10u64.to_ne_bytes());
        assert_eq!(snapshot(&ro_mr), pattern(64, 0x31));
        s.quiet();
        s.say("OK");
    }
    s.finish();
}

/// A fetch of FI_ATOMIC_READ is a remote read (it needs only FI_REMOTE_READ access and
/// the endpoint counts it as one): a counter bound to a region with FI_REMOTE_READ
/// counts it like an RMA read, one bound with FI_REMOTE_WRITE does not.
fn atomic_read_mr_counter<A: Api>(role: Role, link: &mut dyn Link) {
    let mut out = [0u8; 8];
    let mut m1 = pattern(64, 0x41);
    let mut m2 = pattern(64, 0x42);
    let (o1, o2) = (m1.clone(), m2.clone());
    let mut s = Side::<A>::open(role, link, |_| {});
    if s.is_p() {
        let v = nums(&s.hear("MR"));
        let p = s.peer;
        for (i, (addr, key, orig)) in [(v[0], v[1], &o1), (v[2], v[3], &o2)]
            .into_iter()
            .enumerate()
        {
            // SAFETY: `out` outlives the node; read after the completion.
            unsafe { s.n.ep.read(&mut out, p, addr + 8, key, Context(1 + 2 * i)) }.unwrap();
            assert_eq!(s.ok().context(), Context(1 + 2 * i));
            assert_eq!(out[..], orig[8..16]);
            out.fill(0);
            // SAFETY: as above.
            unsafe {
                s.n.ep.fetch_atomic(
                    &[],
                    &mut out,
                    Datatype::Uint64,
                    AtomicOp::AtomicRead,
                    p,
                    addr + 16,
                    key,
                    Context(2 + 2 * i),
                )
            }
            .unwrap();
            assert_eq!(s.ok().context(), Context(2 + 2 * i));
            assert_eq!(out[..], orig[16..24]);
        }
        s.say("DONE");
        s.hear("OK");
    } else {
        let cr = A::cntr(&s.n.domain, &CntrAttr::DEFAULT).unwrap();
        let cw = A::cntr(&s.n.domain, &CntrAttr::DEFAULT).unwrap();
        let r = A::mr_reg(&s.n.domain, &mut m1, &mr_attr(RW, 0x81)).unwrap();
        let w = A::mr_reg(&s.n.domain, &mut m2, &mr_attr(RW, 0x82)).unwrap();
        r.bind_cntr(&cr, BindFlags::REMOTE_READ).unwrap();
        w.bind_cntr(&cw, BindFlags::REMOTE_WRITE).unwrap();
        s.say(&format!(
            "MR {:x} {:x} {:x} {:x}",
            r.remote_addr(),
            r.key(),
            w.remote_addr(),
            w.key()
        ));
        s.hear("DONE");
        // The endpoint counted four remote reads.
        s.cntr_at_least(&s.n.cntr_rx, 4);
        assert_eq!(
            (cr.read(), cw.read()),
            (2, 0),
            "region counters (bound FI_REMOTE_READ, bound FI_REMOTE_WRITE) after an RMA \
             read and an FI_ATOMIC_READ fetch of each region"
        );
        s.say("OK");
    }
    s.finish();
}

// ---------------------------------------------------------------------------------
// Triggered operations and fences
// ---------------------------------------------------------------------------------

/// Operations of the parent triggered by its receive / remote-write counter, which only
/// the child's traffic advances: a tagged send at 2 messages, a write at the first
/// remote write and an atomic at the second. The child sees each one happen only after
/// its own traffic crossed the threshold.
fn triggered<A: Api>(role: Role, link: &mut dyn Link) {
    let mut rbufs = [[0u8; 16]; 2];
    let mut tbuf = [0u8; 16];
    let mut mem = vec![0u8; 64];
    let data16 = pattern(16, 0x16);
    let mut s = Side::<A>::open(role, link, |_| {});
    let mr = A::mr_reg(&s.n.domain, &mut mem, &mr_attr(RW, 0x61)).unwrap();
    mr.write(16, &5u64.to_ne_bytes()).unwrap();
    if !s.is_p() {
        // SAFETY: `tbuf` outlives the node; read after the completion.
        unsafe { s.n.ep.trecv(&mut tbuf, ANY, 0x77, 0, Context(5)).unwrap() };
    }
    s.say(&format!("MR {:x} {:x}", mr.remote_addr(), mr.key()));
    let v = nums(&s.hear("MR"));
    let (p, far_base, far_key) = (s.peer, v[0], v[1]);
    if s.is_p() {
        let base = s.n.cntr_rx.read();
        for (i, r) in rbufs.iter_mut().enumerate() {
            // SAFETY: as above.
            unsafe { s.n.ep.recv(r, ANY, Context(10 + i)).unwrap() };
        }
        let msg = *b"triggered!";
        let iov = [&msg[..]];
        let tm = TaggedMsg {
            iov: &iov,
            addr: p,
            tag: 0x77,
            context: Context(1),
            data: 0,
        };
        s.n.ep
            .tsendmsg_triggered(&tm, OpFlags::empty(), &s.n.cntr_rx, base + 2)
            .unwrap();
        let iov = [&data16[..]];
        let wm = RmaMsg {
            iov: &iov,
            addr: p,
            rma_iov: RmaIov {
                addr: far_base,
                len: 16,
                key: far_key,
            },
            context: Context(2),
            data: 0,
        };
        s.n.ep
            .writemsg_triggered(&wm, OpFlags::empty(), &s.n.cntr_rx, base + 3)
            .unwrap();
        let ten = 10u64.to_ne_bytes();
        let am = AtomicMsg {
            operand: &ten,
            addr: p,
            remote_addr: far_base + 16,
            key: far_key,
            datatype: Datatype::Uint64,
            op: AtomicOp::Sum,
            context: Context(3),
            data: 0,
        };
        s.n.ep
            .atomicmsg_triggered(&am, OpFlags::empty(), &s.n.cntr_rx, base + 4)
            .unwrap();
        s.quiet();
        s.say("ARMED");
        s.hear("SEEN");
        let got = s.collect(&[10, 11, 1, 2, 3]);
        let at = |c: usize| got.iter().position(|e| e.context() == Context(c)).unwrap();
        assert!(at(1) > at(11), "the send fired after the second receive");
        for e in &got {
            let (flags, len) = match e.context().0 {
                10 | 11 => (CqFlags::RECV | CqFlags::MSG, Some(3)),
                1 => (CqFlags::SEND | CqFlags::TAGGED, None),
                2 => (CqFlags::RMA | CqFlags::WRITE, Some(16)),
                _ => (CqFlags::ATOMIC | CqFlags::WRITE, None),
            };
            check_entry(e, e.context(), flags, len, None, None);
        }
        assert_eq!((&rbufs[0][..3], &rbufs[1][..3]), (&b"one"[..], &b"two"[..]));
        assert_eq!(s.n.cntr_rx.read(), base + 4);
        let mine = snapshot(&mr);
        assert_eq!(&mine[..16], b"rwrite!!inject!!");
        s.quiet();
        s.say("CHECKED");
    } else {
        s.hear("ARMED");
        let initial = snapshot(&mr);
        let iov: [&[u8]; 1] = [b"one"];
        let m = Msg {
            iov: &iov,
            addr: p,
            context: Context(20),
            data: 0,
        };
        s.n.ep.sendmsg(&m, OpFlags::DELIVERY_COMPLETE).unwrap();
        assert_eq!(s.ok().context(), Context(20));
        // One message: below every threshold.
        s.quiet();
        assert_eq!(snapshot(&mr), initial);
        let iov: [&[u8]; 1] = [b"two"];
        let m = Msg {
            context: Context(21),
            iov: &iov,
            ..m
        };
        s.n.ep.sendmsg(&m, OpFlags::DELIVERY_COMPLETE).unwrap();
        for e in s.collect(&[21, 5]) {
            if e.context() == Context(5) {
                check_entry(
                    &e,
                    Context(5),
                    CqFlags::RECV | CqFlags::TAGGED,
                    Some(10),
                    Some(0x77),
                    None,
                );
            }
        }
        assert_eq!(&tbuf[..10], b"triggered!");
        assert_eq!(snapshot(&mr), initial, "the write waits for threshold 3");
        let rx = s.n.cntr_rx.read();
        s.n.ep
            .write(b"rwrite!!", p, far_base, far_key, Context(22))
            .unwrap();
        assert_eq!(s.ok().context(), Context(22));
        s.cntr_at_least(&s.n.cntr_rx, rx + 1);
        let now = snapshot(&mr);
        assert_eq!(now[..16], data16[..], "the triggered write landed");
        assert_eq!(now[16..24], 5u64.to_ne_bytes(), "the atomic waits for 4");
        s.retry(|| s.n.ep.inject_write(b"inject!!", p, far_base + 8, far_key));
        s.cntr_at_least(&s.n.cntr_rx, rx + 2);
        assert_eq!(snapshot(&mr)[16..24], 15u64.to_ne_bytes());
        s.say("SEEN");
        s.hear("CHECKED");
        s.quiet();
    }
    s.finish();
}

/// FI_FENCE between processes: a tagged message fenced after a 1 MiB write arrives with
/// the write already in the target's memory; a read followed by a fenced write of the
/// same range returns the old data; a fenced fetch-add after a write sees the written
/// value; fenced operations complete after everything before them.
fn fence<A: Api>(role: Role, link: &mut dyn Link) {
    const X: usize = 1 << 20;
    const Y: usize = 4096;
    // The fetch-add's word, apart from the ranges the child checks as they arrive.
    const Z: usize = X + Y + 8;
    let mut fbuf = [0u8; 8];
    let mut rb = vec![0u8; Y];
    let mut fetched = [0u8; 8];
    let mut mem = pattern(X + Y + 64, 0x0f);
    let old = mem.clone();
    let new1 = pattern(X, 0x1e);
    let new2 = pattern(Y, 0x2d);
    let mut s = Side::<A>::open(role, link, |_| {});
    if s.is_p() {
        let v = nums(&s.hear("MR"));
        let (p, base, key) = (s.peer, v[0], v[1]);
        s.n.ep.write(&new1, p, base, key, Context(1)).unwrap();
        let msg = *b"fenced";
        let iov = [&msg[..]];
        let tm = TaggedMsg {
            iov: &iov,
            addr: p,
            tag: 1,
            context: Context(2),
            data: 0,
        };
        s.n.ep.tsendmsg(&tm, OpFlags::FENCE).unwrap();
        // SAFETY: `rb` outlives the node; read after the completion.
        unsafe { s.n.ep.read(&mut rb, p, base + X as u64, key, Context(3)) }.unwrap();
        let iov = [&new2[..]];
        let wm = RmaMsg {
            iov: &iov,
            addr: p,
            rma_iov: RmaIov {
                addr: base + X as u64,
                len: Y,
                key,
            },
            context: Context(4),
            data: 0,
        };
        s.n.ep.writemsg(&wm, OpFlags::FENCE).unwrap();
        s.n.ep
            .write(&100u64.to_ne_bytes(), p, base + Z as u64, key, Context(5))
            .unwrap();
        let one = 1u64.to_ne_bytes();
        let am = AtomicMsg {
            operand: &one,
            addr: p,
            remote_addr: base + Z as u64,
            key,
            datatype: Datatype::Uint64,
            op: AtomicOp::Sum,
            context: Context(6),
            data: 0,
        };
        // SAFETY: `fetched` outlives the node; read after the completion.
        unsafe { s.n.ep.fetch_atomicmsg(&am, &mut fetched, OpFlags::FENCE) }.unwrap();
        let got = s.collect(&[1, 2, 3, 4, 5, 6]);
        let order: Vec<usize> = got.iter().map(|e| e.context().0).collect();
        let at = |c: usize| order.iter().position(|&x| x == c).unwrap();
        assert!(at(2) > at(1), "fenced send after the write: {order:?}");
        assert!(
            (1..4).all(|c| at(4) > at(c)),
            "fenced write last so far: {order:?}"
        );
        assert!(
            (1..6).all(|c| at(6) > at(c)),
            "fenced atomic last: {order:?}"
        );
        assert!(
            rb[..] == old[X..X + Y],
            "the read before the fenced write saw old data"
        );
        assert_eq!(u64::from_ne_bytes(fetched), 100);
        let mut model = old.clone();
        model[..X].copy_from_slice(&new1);
        model[X..X + Y].copy_from_slice(&new2);
        model[Z..Z + 8].copy_from_slice(&101u64.to_ne_bytes());
        s.say(&format!("CHECK {:x}", full_digest(&model)));
        s.hear("OK");
    } else {
        let mr = A::mr_reg(&s.n.domain, &mut mem, &mr_attr(RW, 0x71)).unwrap();
        // SAFETY: `fbuf` outlives the node; read after the completion.
        unsafe { s.n.ep.trecv(&mut fbuf, ANY, 1, 0, Context(7)).unwrap() };
        s.say(&format!("MR {:x} {:x}", mr.remote_addr(), mr.key()));
        let e = s.ok();
        check_entry(
            &e,
            Context(7),
            CqFlags::RECV | CqFlags::TAGGED,
            Some(6),
            Some(1),
            None,
        );
        // The write before the fence is in memory when the fenced message is.
        let now = snapshot(&mr);
        assert!(
            now[..X] == new1[..],
            "the write landed before the fenced message"
        );
        assert_eq!(&fbuf[..6], b"fenced");
        let want = nums(&s.hear("CHECK"));
        assert_eq!([full_digest(&snapshot(&mr))], want[..]);
        s.quiet();
        s.say("OK");
    }
    s.finish();
}

// ---------------------------------------------------------------------------------
// Concurrency: full-duplex traffic, atomics from two processes at once
// ---------------------------------------------------------------------------------

/// Messages each side sends in [`duplex`].
const DUPLEX: usize = 48;
const DUPLEX_SIZES: [usize; 6] = [0, 49, 4096, 8193, 65_536, 1 << 20];

/// Tags of [`duplex`]: fewer than the sizes, so each tag carries every size class.
const DUPLEX_TAGS: usize = 4;

/// Both sides post directed tagged receives, then send to each other at the same time,
/// as fast as the queues take it, reaping completions as they come. Messages of one tag
/// (inline, staged and cross-memory-attach sizes mixed) must match that tag's receives
/// in sending order, so every receive gets exactly its message, intact; every send
/// completes; the counters agree.
fn duplex<A: Api>(role: Role, link: &mut dyn Link) {
    let mut bufs: Vec<Vec<u8>> = (0..DUPLEX)
        .map(|i| vec![0u8; DUPLEX_SIZES[i % DUPLEX_SIZES.len()] + SLACK])
        .collect();
    let seed = |r: Role, i: usize| (if r == Role::P { 0x1000 } else { 0x2000 }) + i as u64;
    let size = |i: usize| DUPLEX_SIZES[i % DUPLEX_SIZES.len()];
    let mut s = Side::<A>::open(role, link, |_| {});
    let other = if s.is_p() { Role::C } else { Role::P };
    let mine: Vec<Vec<u8>> = (0..DUPLEX)
        .map(|i| pattern(size(i), seed(role, i)))
        .collect();
    let tag = |i: usize| (i % DUPLEX_TAGS) as u64;
    for (i, b) in bufs.iter_mut().enumerate() {
        // SAFETY: `bufs` outlives the node; read after the completions.
        unsafe {
            s.n.ep
                .trecv(b, s.peer, tag(i), 0, Context(1000 + i))
                .unwrap()
        };
    }
    s.sync("posted");
    let (mut sent, mut tx_done, mut rx_done) = (0usize, 0usize, 0usize);
    let mut seen = [false; DUPLEX];
    let deadline = Instant::now() + LINE_DEADLINE;
    while sent < DUPLEX || tx_done < DUPLEX || rx_done < DUPLEX {
        if sent < DUPLEX {
            match s
                .n
                .ep
                .tsend(&mine[sent], s.peer, tag(sent), Context(1 + sent))
            {
                Ok(()) => sent += 1,
                Err(Error::Again) => {}
                Err(e) => panic!("send {sent}: {e}"),
            }
        }
        let mut e = [A::Entry::default(); 1];
        match s.n.cq.read(&mut e) {
            Ok(1) => {
                let c = e[0].context().0;
                if c >= 1000 {
                    let i = c - 1000;
                    assert!(!seen[i], "receive {i} completed twice");
                    check_entry(
                        &e[0],
                        Context(c),
                        CqFlags::RECV | CqFlags::TAGGED,
                        Some(size(i)),
                        Some(tag(i)),
                        None,
                    );
                    seen[i] = true;
                    rx_done += 1;
                } else {
                    check_entry(
                        &e[0],
                        Context(c),
                        CqFlags::SEND | CqFlags::TAGGED,
                        Some(size(c - 1)),
                        None,
                        None,
                    );
                    tx_done += 1;
                }
            }
            Ok(n) => panic!("read {n} entries into one"),
            Err(Error::Avail) => panic!("error entry {:?}", s.n.cq.read_err()),
            Err(Error::Again) => {
                s.n.domain.progress();
            }
            Err(e) => panic!("cq read: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "duplex stuck: sent {sent}, {tx_done} sends and {rx_done} receives done"
        );
    }
    for (i, b) in bufs.iter().enumerate() {
        let n = size(i);
        assert!(b[..n] == pattern(n, seed(other, i))[..], "message {i}");
        assert!(b[n..].iter().all(|&x| x == 0), "message {i} overran");
    }
    assert_eq!(s.n.cntr_tx.read(), DUPLEX as u64);
    assert_eq!(s.n.cntr_rx.read(), DUPLEX as u64);
    s.quiet();
    s.finish();
}

/// Writes and reads each side has in flight at once in [`rma_duplex`].
const RMA_WINDOW: usize = 16;
/// Each side's region in [`rma_duplex`]: the other writes the first half and reads
/// the second.
const RMA_HALF: usize = 2 << 20;

/// Both sides at once: each posts [`RMA_WINDOW`] writes (64 KiB and 224 KiB, each odd
/// one overlapping the one before) into the first half of the other's region and as
/// many reads of its second half, all outstanding together, then reaps them: the reads
/// return the other's initial pattern, and afterwards each side's first half holds
/// exactly what the other wrote, the later of two overlapping writes on top.
fn rma_duplex<A: Api>(role: Role, link: &mut dyn Link) {
    let mut reads: Vec<Vec<u8>> = (0..RMA_WINDOW).map(|_| vec![0u8; 64 << 10]).collect();
    let seed = |r: Role| if r == Role::P { 0x71 } else { 0x72 };
    let mut mem = pattern(2 * RMA_HALF, seed(role));
    let mut s = Side::<A>::open(role, link, |_| {});
    let other = if s.is_p() { Role::C } else { Role::P };
    let mr = A::mr_reg(&s.n.domain, &mut mem, &mr_attr(RW, 0xd0)).unwrap();
    s.say(&format!("MR {:x} {:x}", mr.remote_addr(), mr.key()));
    let v = nums(&s.hear("MR"));
    let (p, base, key) = (s.peer, v[0], v[1]);
    // Even write i covers 64 KiB at i * 128 KiB; odd write i the 224 KiB from 32 KiB into
    // the previous one up to the next: it overlaps the previous write, which was posted
    // first, so (write-after-write ordering) its bytes are the ones that stay.
    let span = |i: usize| {
        if i.is_multiple_of(2) {
            (i * (128 << 10), 64 << 10)
        } else {
            ((i - 1) * (128 << 10) + (32 << 10), 224 << 10)
        }
    };
    let data: Vec<Vec<u8>> = (0..RMA_WINDOW)
        .map(|i| pattern(span(i).1, 0x100 * seed(role) + i as u64))
        .collect();
    s.sync("go");
    for (i, d) in data.iter().enumerate() {
        let (off, _) = span(i);
        s.retry(|| s.n.ep.write(d, p, base + off as u64, key, Context(1 + i)));
    }
    for (i, r) in reads.iter_mut().enumerate() {
        let off = RMA_HALF + i * (64 << 10);
        // SAFETY: `reads` outlives the node; read after every completion is reaped.
        s.retry(|| unsafe {
            s.n.ep
                .read(&mut *r, p, base + off as u64, key, Context(100 + i))
        });
    }
    let ctxs: Vec<usize> = (1..=RMA_WINDOW).chain(100..100 + RMA_WINDOW).collect();
    for e in s.collect(&ctxs) {
        let c = e.context().0;
        let (flags, len) = if c < 100 {
            (CqFlags::RMA | CqFlags::WRITE, span(c - 1).1)
        } else {
            (CqFlags::RMA | CqFlags::READ, 64 << 10)
        };
        check_entry(&e, Context(c), flags, Some(len), None, None);
    }
    let theirs = pattern(2 * RMA_HALF, seed(other));
    for (i, r) in reads.iter().enumerate() {
        let off = RMA_HALF + i * (64 << 10);
        assert!(r[..] == theirs[off..off + r.len()], "read {i}");
    }
    // Both are done: what the other wrote is here, in its order.
    s.sync("done");
    let mut want = pattern(2 * RMA_HALF, seed(role));
    for i in 0..RMA_WINDOW {
        let (off, n) = span(i);
        want[off..off + n].copy_from_slice(&pattern(n, 0x100 * seed(other) + i as u64));
    }
    assert!(snapshot(&mr) == want, "the region after the other's writes");
    assert_eq!(s.n.cntr_rx.read(), 2 * RMA_WINDOW as u64);
    assert_eq!(s.n.cntr_tx.read(), 2 * RMA_WINDOW as u64);
    s.quiet();
    s.finish();
}

/// Fetch-adds per initiator in [`atomics_concurrent`].
const FADDS: usize = 300;

/// Two initiators in two processes (the parent's endpoint and a second endpoint of the
/// child) fetch-add 1 on the same u64 of the child's first endpoint, all operations in
/// flight at once: the fetched values of both together are exactly 0..2N, the final
/// value 2N.
fn atomics_concurrent<A: Api>(role: Role, link: &mut dyn Link) {
    let mut res = vec![[0u8; 8]; FADDS];
    let mut mem = vec![0u8; 64];
    let mut s = Side::<A>::open(role, link, |_| {});
    // Posts every fetch-add from `ep` and reaps them from `cq`, driving `drive`.
    fn hammer<A: Api>(
        ep: &A::Ep,
        cq: &A::Cq,
        dest: FiAddr,
        (addr, key): (u64, u64),
        res: &mut [[u8; 8]],
        drive: &[&dyn DomainOps],
    ) -> Vec<u64> {
        let one = 1u64.to_ne_bytes();
        for (i, r) in res.iter_mut().enumerate() {
            // SAFETY: `res` outlives the endpoint (declared before the nodes); read
            // after every completion was reaped below.
            retry(drive, || unsafe {
                ep.fetch_atomic(
                    &one,
                    &mut *r,
                    Datatype::Uint64,
                    AtomicOp::Sum,
                    dest,
                    addr,
                    key,
                    Context(1 + i),
                )
            });
        }
        let got: HashSet<usize> = (0..res.len())
            .map(|_| wait_ok(cq, drive).context().0)
            .collect();
        assert_eq!(got.len(), res.len(), "every fetch-add completed once");
        res.iter().map(|r| u64::from_ne_bytes(*r)).collect()
    }
    let report = |v: &[u64]| {
        v.iter()
            .map(|x| format!("{x:x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let check = |a: &[u64], b: &[u64]| {
        let all: HashSet<u64> = a.iter().chain(b).copied().collect();
        assert_eq!(all.len(), 2 * FADDS, "fetched values are distinct");
        assert!(
            all.iter().all(|&x| x < 2 * FADDS as u64),
            "fetched a value out of range"
        );
    };
    if s.is_p() {
        let v = nums(&s.hear("MR"));
        s.sync("go");
        let mine = hammer::<A>(
            &s.n.ep,
            &s.n.cq,
            s.peer,
            (v[0], v[1]),
            &mut res,
            &[&s.n.domain],
        );
        s.say(&format!("FETCHED {}", report(&mine)));
        let theirs = nums(&s.hear("FETCHED"));
        check(&mine, &theirs);
        s.hear("OK");
    } else {
        let mr = A::mr_reg(&s.n.domain, &mut mem, &mr_attr(RW, 0x90)).unwrap();
        let n2 = node::<A>(|_| {});
        let me = n2.av.insert(&s.n.ep.name()).unwrap();
        s.say(&format!("MR {:x} {:x}", mr.remote_addr(), mr.key()));
        s.sync("go");
        let mine = hammer::<A>(
            &n2.ep,
            &n2.cq,
            me,
            (mr.remote_addr(), mr.key()),
            &mut res,
            &[&n2.domain, &s.n.domain],
        );
        s.say(&format!("FETCHED {}", report(&mine)));
        let theirs = nums(&s.hear_also("FETCHED", &[&n2.domain]));
        check(&mine, &theirs);
        assert_eq!(snapshot(&mr)[..8], (2 * FADDS as u64).to_ne_bytes());
        assert_eq!(s.n.cntr_rx.read(), 2 * FADDS as u64);
        s.say("OK");
    }
    s.finish();
}

// ---------------------------------------------------------------------------------
// Blocking waits woken by the other process
// ---------------------------------------------------------------------------------

/// How long the sending side lets the blocked side sleep first.
const NAP: Duration = Duration::from_millis(30);
/// How soon a blocked wait must return once the other side sent.
const WAKE: Duration = Duration::from_secs(2);

/// Each side in turn blocks in `fi_cq_sread` and then in `fi_cntr_wait` while the
/// other process sends to it: both return with the completion well within their
/// timeout.
fn blocking_waits<A: Api>(role: Role, link: &mut dyn Link) {
    let mut bufs = [[0u8; 8]; 2];
    let mut s = Side::<A>::open(role, link, |_| {});
    for blocker in [Role::P, Role::C] {
        if s.role == blocker {
            let [b0, b1] = &mut bufs;
            // SAFETY: `bufs` outlives the node; read after the completions.
            unsafe {
                s.n.ep.recv(b0, ANY, Context(10)).unwrap();
                s.n.ep.recv(b1, ANY, Context(11)).unwrap();
            }
            s.say("BLOCK sread");
            let mut es = [A::Entry::default(); 1];
            let t0 = Instant::now();
            let n = s.n.cq.sread(&mut es, 1, Some(Duration::from_secs(5)));
            let dt = t0.elapsed();
            assert_eq!(n, Ok(1), "sread woken by the other process ({dt:?})");
            assert!(dt < WAKE, "sread took {dt:?}");
            assert_eq!(es[0].context(), Context(10));
            s.say("BLOCK cntr");
            let t0 = Instant::now();
            let r = s.n.cntr_rx.wait(2, Some(Duration::from_secs(5)));
            let dt = t0.elapsed();
            assert_eq!(
                r,
                Ok(()),
                "counter wait woken by the other process ({dt:?})"
            );
            assert!(dt < WAKE, "counter wait took {dt:?}");
            assert_eq!(s.ok().context(), Context(11));
            assert_eq!(
                (&bufs[0][..5], &bufs[1][..4]),
                (&b"sread"[..], &b"cntr"[..])
            );
            bufs = [[0u8; 8]; 2];
            s.n.cntr_rx.set(0);
        } else {
            for (i, what) in ["sread", "cntr"].into_iter().enumerate() {
                s.hear(&format!("BLOCK {what}"));
                std::thread::sleep(NAP);
                s.n.ep
                    .send(what.as_bytes(), s.peer, Context(1 + i))
                    .unwrap();
                assert_eq!(s.ok().context(), Context(1 + i));
            }
        }
        s.sync("turn");
    }
    s.finish();
}

/// The same with `FI_WAIT_FD` CQs: after `fi_trywait` the side blocks in `poll(2)` on
/// the CQ's descriptor, which must become readable when the other process's message
/// completes a receive.
fn wait_fd<A: Api>(role: Role, link: &mut dyn Link) {
    let mut buf = [0u8; 8];
    let fd_attr = CqAttr {
        wait_obj: WaitObj::Fd,
        ..CqAttr::DEFAULT
    };
    let n = node_with::<A>(|_| {}, &fd_attr, BindFlags::empty());
    let mut s = Side::<A>::with_node(role, link, n);
    for blocker in [Role::P, Role::C] {
        if s.role == blocker {
            let fd = s.n.cq.wait_fd().expect("an FI_WAIT_FD CQ has a descriptor");
            // SAFETY: `buf` outlives the node; read after the completion.
            unsafe { s.n.ep.recv(&mut buf, ANY, Context(10)).unwrap() };
            assert_eq!(s.n.cq.trywait(), Ok(()));
            s.say("BLOCK");
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let t0 = Instant::now();
            // SAFETY: one valid pollfd for the duration of the call.
            let r = unsafe { libc::poll(&mut p, 1, 3000) };
            let dt = t0.elapsed();
            assert!(r >= 0, "poll failed");
            assert!(
                r == 1 && p.revents & libc::POLLIN != 0,
                "the CQ's fd did not become readable for a message from the other process \
                 (poll returned {r} after {dt:?})"
            );
            assert_eq!(s.ok().context(), Context(10));
            assert_eq!(&buf[..2], b"fd");
            buf = [0; 8];
        } else {
            s.hear("BLOCK");
            std::thread::sleep(NAP);
            s.n.ep.send(b"fd", s.peer, Context(1)).unwrap();
            assert_eq!(s.ok().context(), Context(1));
        }
        s.sync("turn");
    }
    s.finish();
}

// ---------------------------------------------------------------------------------
// The matrix
// ---------------------------------------------------------------------------------

matrix! {
    default: St<Stack<Prov>> => [
        data, matching, multi_recv, cancel_unexpected, truncation, rma, rma_prov_keys,
        atomics, triggered, fence, duplex, rma_duplex, atomics_concurrent, blocking_waits,
        msg_inject_flag,
        wait_fd,
        atomic_read_mr_counter,
    ];
    completion: St<Stack<Prov, ThreadCompletion, Manual>> => [
        data_core, matching, rma, atomics, triggered, fence, rma_duplex,
    ];
    endpoint_map: St<Stack<Prov, ThreadEndpoint, Manual, CqTagged, Map>> => [
        data_core, matching, rma, triggered,
    ];
    safe: St<Stack<Prov, ThreadSafe>> => [data_core, matching, rma, fence];
    safe_auto: St<Stack<Prov, ThreadSafe, Auto>> => [
        data, matching, multi_recv, cancel_unexpected, rma, atomics, triggered, fence, duplex,
        rma_duplex, atomics_concurrent, blocking_waits, wait_fd,
    ];
    completion_auto_map: St<Stack<Prov, ThreadCompletion, Auto, CqTagged, Map>> => [
        data_core, matching, rma, triggered, duplex, blocking_waits, wait_fd,
    ];
    cq_context: St<Stack<Prov, ThreadDomain, Manual, CqContext>> => [
        data_core, matching, multi_recv, truncation,
    ];
    cq_msg: St<Stack<Prov, ThreadDomain, Manual, CqMsg>> => [
        data_core, matching, multi_recv, truncation,
    ];
    cq_data: St<Stack<Prov, ThreadDomain, Manual, CqData>> => [
        data_core, matching, multi_recv, rma,
    ];
    dyn_default: Dy<DynDefault> => [data_core, matching, rma, atomics, triggered];
    dyn_safe_auto: Dy<DynSafeAuto> => [data_core, matching, rma, duplex];
    bounce: St<Stack<Prov>>, env = &[("FABRIC_SHM_CMA", "0")] => [
        data, matching, cancel_unexpected, rma, duplex, rma_duplex,
    ];
}
