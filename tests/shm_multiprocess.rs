//! The shm provider between real processes. Each test re-runs this test binary as
//! child processes (`child_entry`, ignored in normal runs) that take a role; the
//! parent relays endpoint names between them over the children's stdin/stdout, the way
//! `fi_pingpong` ships names over its control socket, and checks what they report.
//!
//! Roles run on any stack of the configuration matrix (threading level, progress
//! model, AV type), chosen with `FABRIC_SHM_STACK`; `FABRIC_SHM_CMA=0` in a child's
//! environment forces the bounce-buffer path for its large payloads.

mod shm_child;

use std::time::{Duration, Instant};

use fabric::prelude::*;
use fabric_shm::Shm;
use shm_child::{
    hex,
    node::{next, node, pattern, Node},
    unhex, Ctl, Kid, DEADLINE, ROLE, STACK,
};

// ---------------------------------------------------------------------------------
// Parent side: spawning children and talking to them
// ---------------------------------------------------------------------------------

/// Runs roles `a` and `b` in two children on `stack`, relaying their names; both must
/// succeed.
fn run_pair(a: &str, b: &str, stack: &str, env: &[(&str, &str)]) {
    let mut ka = Kid::spawn(a, stack, env);
    let mut kb = Kid::spawn(b, stack, env);
    let na = ka.expect("NAME");
    let nb = kb.expect("NAME");
    ka.say(&format!("PEER {nb}"));
    kb.say(&format!("PEER {na}"));
    ka.finish();
    kb.finish();
}

fn shm_files() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------
// Endpoints on any stack
// ---------------------------------------------------------------------------------

/// FNV-1a, to compare memory across processes.
fn digest(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100000001b3)
    })
}

/// Sizes crossing every path: compact (one line), full header, several cells, the
/// largest inline payload, staged payloads.
const SIZES: &[usize] = &[
    0,
    1,
    8,
    48,
    49,
    200,
    4096,
    8192,
    8193,
    65536,
    1 << 20,
    4 << 20,
];

// ---------------------------------------------------------------------------------
// Child side: roles
// ---------------------------------------------------------------------------------

/// Exchanges names with the parent: reports ours, learns the peer's.
fn connect<S: Config>(ctl: &Ctl, n: &Node<S>) -> FiAddr {
    ctl.report(&format!("NAME {}", hex(&n.ep.name())));
    let peer = unhex(&ctl.expect("PEER"));
    n.av.insert(&peer).expect("av insert")
}

/// Receives every message of [`SIZES`] (tagged and untagged, with and without remote
/// CQ data) and sends it back.
fn role_echo<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let mut buf = vec![0u8; 4 << 20];
    let n = node::<S>();
    let peer = connect(ctl, &n);
    for (i, &size) in SIZES.iter().enumerate() {
        for tagged in [false, true] {
            let tag = i as u64 * 2 + tagged as u64;
            // SAFETY: `buf` outlives the node and is read only after the completion.
            unsafe {
                if tagged {
                    n.ep.trecv(&mut buf, FiAddr::UNSPEC, tag, 0, Context(1))
                        .unwrap();
                } else {
                    n.ep.recv(&mut buf, FiAddr::UNSPEC, Context(1)).unwrap();
                }
            }
            let e = next(&n).expect("receive");
            assert_eq!(e.len, size);
            if tagged {
                assert_eq!(e.tag, tag);
            }
            let back = buf[..size].to_vec();
            loop {
                let r = if tagged {
                    n.ep.tsenddata(&back, e.data, peer, tag, Context(2))
                } else {
                    n.ep.senddata(&back, e.data, peer, Context(2))
                };
                match r {
                    Ok(()) => break,
                    Err(Error::Again) => {
                        n.domain.progress();
                    }
                    Err(err) => panic!("echo send: {err}"),
                }
            }
            next(&n).expect("echo send completion");
        }
    }
    ctl.report("DONE");
}

/// Sends every message of [`SIZES`] and checks the echo.
fn role_drive_echo<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    let peer = connect(ctl, &n);
    drive_echo(ctl, &n, peer);
}

/// Tries to resize every shared file of the peer through `/proc/<pid>/fd/<n>`, as any
/// process of the user can, reports how many attempts were refused and how many
/// succeeded, then runs `drive_echo` against it: its rings and staging files must
/// still work.
fn role_truncate_then_drive_echo<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    use std::os::fd::AsRawFd;
    let n = node::<S>();
    ctl.report(&format!("NAME {}", hex(&n.ep.name())));
    let raw = unhex(&ctl.expect("PEER"));
    let pid = fabric_shm::name::Name::decode(&raw).unwrap().pid;
    let peer = n.av.insert(&raw).expect("av insert");
    let (mut refused, mut done) = (0, 0);
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let path = e.unwrap().path();
        let is_ours = std::fs::read_link(&path)
            .is_ok_and(|t| t.to_string_lossy().starts_with("/memfd:fabric-shm"));
        if !is_ours {
            continue;
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        for len in [1 << 30, 0] {
            // SAFETY: a plain syscall on a descriptor we own.
            if unsafe { libc::ftruncate(f.as_raw_fd(), len) } == 0 {
                done += 1;
            } else {
                assert_eq!(
                    std::io::Error::last_os_error().raw_os_error(),
                    Some(libc::EPERM)
                );
                refused += 1;
            }
        }
    }
    ctl.report(&format!("TRUNCATE {refused} {done}"));
    drive_echo(ctl, &n, peer);
}

/// The address space this process has mapped (`VmSize`), in bytes.
fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

/// Opens endpoints (of the geometry the environment asks for) under an address-space
/// limit a little above what the process maps, until one is refused; reports how many
/// opened and the error. A process that aborted on the exhausted memory reports
/// nothing.
fn role_open_until_refused<S: Config>(ctl: &Ctl) {
    let hints = Hints::new()
        .caps(Caps::MSG | Caps::TAGGED)
        .ep_type(EpType::Rdm);
    let info = getinfo::<S>(Some(&hints)).expect("getinfo").remove(0);
    let fabric = Fabric::<S>::open(&info).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    let mut eps = Vec::new();
    // Room for the test harness's threads and a few endpoints, not for many.
    let limit = vm_size() + (256 << 20);
    let lim = libc::rlimit {
        rlim_cur: limit,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a plain syscall with a valid struct.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
    let err = loop {
        match domain.endpoint(&info) {
            Ok(ep) => eps.push(ep),
            Err(e) => break e,
        }
        assert!(eps.len() < 10_000, "no limit reached");
    };
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
    ctl.report(&format!("REFUSED {} {err:?}", eps.len()));
}

/// Sends every message of [`SIZES`] to `peer` (an echo) and checks the echo.
fn drive_echo<S: Config>(ctl: &Ctl, n: &Node<S>, peer: FiAddr)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let mut buf = vec![0u8; 4 << 20];
    for (i, &size) in SIZES.iter().enumerate() {
        for tagged in [false, true] {
            let tag = i as u64 * 2 + tagged as u64;
            let data = 0xd00d_0000 + tag;
            let msg = pattern(size, tag);
            // SAFETY: as in `role_echo`.
            unsafe {
                if tagged {
                    n.ep.trecv(&mut buf, peer, tag, 0, Context(3)).unwrap();
                } else {
                    n.ep.recv(&mut buf, peer, Context(3)).unwrap();
                }
            }
            loop {
                let r = if tagged {
                    n.ep.tsenddata(&msg, data, peer, tag, Context(4))
                } else {
                    n.ep.senddata(&msg, data, peer, Context(4))
                };
                match r {
                    Ok(()) => break,
                    Err(Error::Again) => {
                        n.domain.progress();
                    }
                    Err(err) => panic!("send: {err}"),
                }
            }
            let mut got_send = false;
            let mut got_recv = false;
            while !(got_send && got_recv) {
                let e = next(n).expect("completion");
                if e.op_context == Context(4) {
                    got_send = true;
                } else {
                    assert_eq!(e.op_context, Context(3));
                    assert_eq!(e.len, size, "size {size} tagged {tagged}");
                    assert_eq!(e.data, data);
                    assert!(buf[..size] == msg[..], "echo of {size} bytes differs");
                    got_recv = true;
                }
            }
        }
    }
    ctl.report("DONE");
}

const RW_KEY: u64 = 0x5151;
const RO_KEY: u64 = 0x7272;
const RW_LEN: usize = 1 << 20;
const RO_LEN: usize = 4096;

/// Registers a read-write and a read-only region, serves RMA and atomics until told to
/// stop, then reports digests of both regions.
fn role_rma_target<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let mut rw = vec![0u8; RW_LEN];
    let mut ro = pattern(RO_LEN, 99);
    let n = node::<S>();
    let attr = |access, key| MrAttr {
        access,
        offset: 0,
        requested_key: key,
        context: 0,
    };
    let mr_rw = n
        .domain
        .mr_reg(
            &mut rw,
            &attr(MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE, RW_KEY),
        )
        .unwrap();
    let mr_ro = n
        .domain
        .mr_reg(&mut ro, &attr(MrAccess::REMOTE_READ, RO_KEY))
        .unwrap();
    mr_rw.bind_ep(&n.ep).ok();
    mr_ro.bind_ep(&n.ep).ok();
    let _peer = connect(ctl, &n);
    loop {
        n.domain.progress();
        if let Some(l) = ctl.try_line() {
            assert_eq!(l, "STOP");
            break;
        }
        std::hint::spin_loop();
    }
    let mut a = vec![0u8; RW_LEN];
    let mut b = vec![0u8; RO_LEN];
    mr_rw.read(0, &mut a).unwrap();
    mr_ro.read(0, &mut b).unwrap();
    ctl.report(&format!("DIGEST {:x} {:x}", digest(&a), digest(&b)));
}

/// Drives RMA and atomics against an `rma_target`, checking every result, then checks
/// the target's memory through its digests.
fn role_drive_rma<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    let peer = connect(ctl, &n);
    let mut model = vec![0u8; RW_LEN];
    // Writes of every path, then reads of the same ranges.
    for (off, size) in [
        (0usize, 8usize),
        (100, 4096),
        (8192, 8193),
        (65536, 300_000),
    ] {
        let data = pattern(size, off as u64);
        n.ep.write(&data, peer, off as u64, RW_KEY, Context(10))
            .unwrap();
        next(&n).expect("write");
        model[off..off + size].copy_from_slice(&data);
        let mut back = vec![0u8; size];
        // SAFETY: `back` lives until the read's completion is taken just below.
        unsafe {
            n.ep.read(&mut back, peer, off as u64, RW_KEY, Context(11))
                .unwrap()
        };
        let e = next(&n).expect("read");
        assert_eq!(e.op_context, Context(11));
        assert!(back == data, "read back {size} bytes differs");
    }
    // Fetch-add: 100 increments, each returning the previous value.
    let at = 500_000u64;
    for i in 0..100u64 {
        let mut old = [0u8; 8];
        // SAFETY: `old` lives until the completion below.
        unsafe {
            n.ep.fetch_atomic(
                &1u64.to_ne_bytes(),
                &mut old,
                Datatype::Uint64,
                AtomicOp::Sum,
                peer,
                at,
                RW_KEY,
                Context(12),
            )
            .unwrap()
        };
        next(&n).expect("fetch-add");
        assert_eq!(u64::from_ne_bytes(old), i);
    }
    model[at as usize..at as usize + 8].copy_from_slice(&100u64.to_ne_bytes());
    // Compare-swap 100 -> 7.
    let mut old = [0u8; 8];
    // SAFETY: `old` lives until the completion below.
    unsafe {
        n.ep.compare_atomic(
            &7u64.to_ne_bytes(),
            &100u64.to_ne_bytes(),
            &mut old,
            Datatype::Uint64,
            AtomicOp::Cswap,
            peer,
            at,
            RW_KEY,
            Context(13),
        )
        .unwrap()
    };
    next(&n).expect("cswap");
    assert_eq!(u64::from_ne_bytes(old), 100);
    model[at as usize..at as usize + 8].copy_from_slice(&7u64.to_ne_bytes());
    // Errors: wrong key, one byte out of range, no write permission, large and small.
    let junk = vec![0xeeu8; 20_000];
    let cases: [(&[u8], u64, u64, Error); 5] = [
        (&junk[..8], 0, 0xbad, Error::Access),
        (&junk[..8], (RW_LEN - 7) as u64, RW_KEY, Error::Access),
        (&junk[..], (RW_LEN - 19_999) as u64, RW_KEY, Error::Access),
        (&junk[..8], 0, RO_KEY, Error::Access),
        (&junk[..], 0, RO_KEY, Error::Access),
    ];
    for (i, (buf, addr, key, _)) in cases.iter().enumerate() {
        n.ep.write(buf, peer, *addr, *key, Context(20 + i)).unwrap();
        let e = next(&n).expect_err("bad write must fail");
        assert_eq!(e.context, Context(20 + i));
        assert!(
            matches!(
                e.err,
                Error::Access | Error::Fault | Error::Inval | Error::KeyRejected
            ),
            "bad write {i}: {:?}",
            e.err
        );
    }
    let mut old = [0u8; 8];
    // SAFETY: `old` lives until the completion below.
    unsafe {
        n.ep.fetch_atomic(
            &1u64.to_ne_bytes(),
            &mut old,
            Datatype::Uint64,
            AtomicOp::Sum,
            peer,
            0,
            RO_KEY,
            Context(30),
        )
        .unwrap()
    };
    assert!(
        next(&n).is_err(),
        "atomic into a read-only region must fail"
    );
    let mut back = vec![0u8; 16];
    // SAFETY: `back` lives until the completion below.
    unsafe {
        n.ep.read(&mut back, peer, (RO_LEN - 8) as u64, RO_KEY, Context(31))
            .unwrap()
    };
    assert!(next(&n).is_err(), "read past the end must fail");
    // The target's memory is exactly the model.
    let want = format!("{:x} {:x}", digest(&model), digest(&pattern(RO_LEN, 99)));
    ctl.report(&format!("WANT {want}"));
}

/// Connects, then never progresses: everything sent to it stays pending.
fn role_hold<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    let _peer = connect(ctl, &n);
    ctl.report("HOLDING");
    std::thread::sleep(DEADLINE * 2);
}

/// Sends `FLOOD` tagged messages as fast as it can, retrying on EAGAIN.
fn role_flood<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    let peer = connect(ctl, &n);
    let mut again = 0u64;
    let mut reported = false;
    for i in 0..FLOOD {
        let msg = pattern(64, i);
        loop {
            match n.ep.tinject(&msg, peer, i) {
                Ok(()) => break,
                Err(Error::Again) => {
                    again += 1;
                    if again == 1000 && !reported {
                        ctl.report(&format!("BLOCKED {i}"));
                        reported = true;
                    }
                    n.domain.progress();
                    std::thread::yield_now();
                }
                Err(e) => panic!("flood send {i}: {e}"),
            }
        }
    }
    ctl.report(&format!("SENT {again}"));
    ctl.expect("BYE");
}

const FLOOD: u64 = 20_000;

/// Rendezvous sizes (the smallest rendezvous payload and larger).
const RNDV_SIZES: &[usize] = &[fabric_shm::RNDV_MIN, 1 << 20, 16 << 20];

/// Sends [`RNDV_SIZES`] once told to, before the receiver posts or polls anything, and
/// reports how long each send call took.
fn role_rndv_send<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    let peer = connect(ctl, &n);
    ctl.expect("GO");
    let mut took = Vec::new();
    for (i, &size) in RNDV_SIZES.iter().enumerate() {
        let msg = pattern(size, 0x70 + i as u64);
        let t = Instant::now();
        loop {
            match n.ep.tsend(&msg, peer, i as u64, Context(i)) {
                Ok(()) => break,
                Err(Error::Again) => {
                    n.domain.progress();
                }
                Err(e) => panic!("rendezvous send of {size}: {e}"),
            }
        }
        took.push(format!("{size}:{}us", t.elapsed().as_micros()));
        // The caller's buffer is reused at once: the receiver must not see this.
        drop(msg);
        next(&n).expect("send completion");
    }
    ctl.report(&format!("SENT {}", took.join(" ")));
    // Staged copies live in this process until the receiver read them.
    ctl.expect("BYE");
}

/// Posts its receives only once told to (long after the sends returned) and checks
/// every byte.
fn role_late_recv<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    let peer = connect(ctl, &n);
    ctl.report("READY");
    ctl.expect("GO");
    let mut buf = vec![0u8; 16 << 20];
    for (i, &size) in RNDV_SIZES.iter().enumerate() {
        // SAFETY: `buf` outlives the receive and is read after its completion.
        unsafe { n.ep.trecv(&mut buf, peer, i as u64, 0, Context(7)).unwrap() };
        let e = next(&n).expect("late receive");
        assert_eq!(e.len, size);
        assert!(
            buf[..size] == pattern(size, 0x70 + i as u64)[..],
            "{size} bytes differ"
        );
    }
    ctl.report("DONE");
}

/// Sends one large message (with a rendezvous bound far longer than the test) to a
/// peer that never polls, and reports the outcome of the send call once it returns.
fn role_rndv_to_dying<S: Config>(ctl: &Ctl)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let n = node::<S>();
    let peer = connect(ctl, &n);
    ctl.expect("GO");
    let msg = pattern(16 << 20, 3);
    ctl.report("SENDING");
    let t = Instant::now();
    let r = n.ep.tsend(&msg, peer, 1, Context(1));
    let outcome = match r {
        Ok(()) => "Ok".to_string(),
        Err(e) => format!("{e:?}"),
    };
    ctl.report(&format!("RESULT {outcome} {}", t.elapsed().as_millis()));
}

macro_rules! with_stack {
    ($name:expr, $f:ident $(, $arg:expr)*) => {
        match $name {
            "default" => $f::<Stack<Shm>>($($arg),*),
            "safe" => $f::<Stack<Shm, ThreadSafe>>($($arg),*),
            "safe_auto" => $f::<Stack<Shm, ThreadSafe, Auto>>($($arg),*),
            "domain_map" => $f::<Stack<Shm, ThreadDomain, Manual, CqTagged, Map>>($($arg),*),
            "endpoint" => $f::<Stack<Shm, ThreadEndpoint>>($($arg),*),
            "completion_auto_map" => $f::<Stack<Shm, ThreadCompletion, Auto, CqTagged, Map>>($($arg),*),
            other => panic!("unknown stack {other}"),
        }
    };
}

/// The configurations the cross-process tests run on.
const STACKS: &[&str] = &[
    "default",
    "safe",
    "safe_auto",
    "domain_map",
    "endpoint",
    "completion_auto_map",
];

/// Entry point of child processes (does nothing unless started as one).
#[test]
#[ignore = "child process of the multi-process tests"]
fn child_entry() {
    let (Ok(role), Ok(stack)) = (std::env::var(ROLE), std::env::var(STACK)) else {
        return;
    };
    let ctl = Ctl::new();
    match role.as_str() {
        "echo" => with_stack!(stack.as_str(), role_echo, &ctl),
        "drive_echo" => with_stack!(stack.as_str(), role_drive_echo, &ctl),
        "open_once" => with_stack!(stack.as_str(), role_open_once, &ctl),
        "open_until_refused" => with_stack!(stack.as_str(), role_open_until_refused, &ctl),
        "truncate_then_drive_echo" => {
            with_stack!(stack.as_str(), role_truncate_then_drive_echo, &ctl)
        }
        "rma_target" => with_stack!(stack.as_str(), role_rma_target, &ctl),
        "drive_rma" => with_stack!(stack.as_str(), role_drive_rma, &ctl),
        "hold" => with_stack!(stack.as_str(), role_hold, &ctl),
        "flood" => with_stack!(stack.as_str(), role_flood, &ctl),
        "rndv_send" => with_stack!(stack.as_str(), role_rndv_send, &ctl),
        "late_recv" => with_stack!(stack.as_str(), role_late_recv, &ctl),
        "rndv_to_dying" => with_stack!(stack.as_str(), role_rndv_to_dying, &ctl),
        other => panic!("unknown role {other}"),
    }
}

// ---------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------

/// Messages of every size class and kind cross between two processes and come back
/// intact, on every stack of the matrix.
#[test]
fn echo_across_processes_every_stack() {
    for stack in STACKS {
        run_pair("echo", "drive_echo", stack, &[]);
    }
}

/// The same with large payloads through the bounce-buffer fallback in both processes.
#[test]
fn echo_across_processes_bounce_buffers() {
    for stack in ["default", "safe_auto"] {
        run_pair("echo", "drive_echo", stack, &[("FABRIC_SHM_CMA", "0")]);
    }
}

/// Where the kernel refuses cross-memory attach between the two processes although
/// each may read itself (Yama's `ptrace_scope = 1` between siblings, simulated by
/// the provider's test hook), every message still arrives intact both ways: 64 KiB,
/// 1 MiB and 4 MiB ones by rendezvous and staged privately (a rendezvous minimum
/// beyond every size), each falling back to the sender's shared files for that peer.
#[test]
fn large_messages_cross_where_the_kernel_refuses_cma() {
    let deny = ("FABRIC_SHM_TEST_CMA_DENY", "others");
    for stack in ["default", "safe_auto"] {
        run_pair("echo", "drive_echo", stack, &[deny]);
    }
    run_pair(
        "echo",
        "drive_echo",
        "default",
        &[deny, ("FABRIC_SHM_RNDV_MIN", "1073741824")],
    );
}

/// Tries to open an endpoint and reports the outcome.
fn role_open_once<S: Config>(ctl: &Ctl) {
    let hints = Hints::new().caps(Caps::MSG).ep_type(EpType::Rdm);
    let info = getinfo::<S>(Some(&hints)).expect("getinfo").remove(0);
    let fabric = Fabric::<S>::open(&info).expect("fabric");
    let domain = fabric.domain(&info).expect("domain");
    match domain.endpoint(&info) {
        Ok(_) => ctl.report("OPENED"),
        Err(e) => ctl.report(&format!("REFUSED {e:?}")),
    }
}

/// Every numeric `FABRIC_SHM_*` variable with a value that is no number (or out of
/// bounds) makes endpoint open fail with `FI_EINVAL` and a message on stderr naming
/// the variable and the value; valid values open.
#[test]
fn bad_environment_values_fail_endpoint_open() {
    let run = |var: &str, value: &str| {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["child_entry", "--exact", "--ignored", "--nocapture"])
            .env(ROLE, "open_once")
            .env(STACK, "default")
            .env(var, value)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{var}={value}: {stderr}");
        (stdout, stderr)
    };
    for var in [
        "FABRIC_SHM_CHANNELS",
        "FABRIC_SHM_CELLS",
        "FABRIC_SHM_RNDV_MIN",
        "FABRIC_SHM_RNDV_WAIT_US",
        "FABRIC_SHM_CMA",
    ] {
        let (stdout, stderr) = run(var, "abc");
        assert!(stdout.contains("@@ REFUSED Inval"), "{var}=abc: {stdout}");
        assert!(
            stderr.contains(var) && stderr.contains("abc"),
            "{var}=abc: stderr {stderr:?}"
        );
    }
    let (stdout, stderr) = run("FABRIC_SHM_CELLS", "300");
    assert!(stdout.contains("@@ REFUSED Inval"), "{stdout}");
    assert!(stderr.contains("FABRIC_SHM_CELLS=300"), "{stderr:?}");
    for (var, good) in [("FABRIC_SHM_CHANNELS", "8"), ("FABRIC_SHM_CMA", "1")] {
        assert!(run(var, good).0.contains("@@ OPENED"), "{var}={good}");
    }
}

/// Endpoint open returns `FI_ENOMEM` when memory runs out, instead of aborting the
/// process: under an address-space limit, with the default geometry (after a few
/// endpoints) and with a huge one (at once).
#[test]
fn endpoint_open_out_of_memory_is_nomem() {
    for (env, most) in [
        (&[][..], 10_000),
        (
            &[
                ("FABRIC_SHM_CHANNELS", "64"),
                ("FABRIC_SHM_CELLS", "1048576"),
            ][..],
            0,
        ),
    ] {
        let kid = Kid::spawn("open_until_refused", "default", env);
        let got = kid.expect("REFUSED");
        let (n, err) = got.split_once(' ').unwrap();
        assert_eq!(err, "NoMem", "env {env:?}");
        assert!(
            n.parse::<usize>().unwrap() <= most,
            "{n} endpoints, env {env:?}"
        );
        kid.finish();
    }
}

/// A process of the same user that truncates (or grows) an endpoint's region and
/// staging files through `/proc/<pid>/fd/<n>` is refused (`EPERM`: the files are
/// sealed at their size), and the endpoint keeps working: every message of every
/// size crosses both ways afterwards. With files that can be resized, the next access
/// of either side's mapping raised `SIGBUS`.
#[test]
fn truncating_a_peers_files_is_refused() {
    for env in [&[][..], &[("FABRIC_SHM_CMA", "0")][..]] {
        let mut a = Kid::spawn("echo", "default", env);
        let mut b = Kid::spawn("truncate_then_drive_echo", "default", env);
        let na = a.expect("NAME");
        let nb = b.expect("NAME");
        a.say(&format!("PEER {nb}"));
        b.say(&format!("PEER {na}"));
        let counts = b.expect("TRUNCATE");
        let (refused, done) = counts.split_once(' ').unwrap();
        let (refused, done): (usize, usize) = (refused.parse().unwrap(), done.parse().unwrap());
        // Both sides first finish their work (or show how they died), then the counts.
        for kid in [&mut b, &mut a] {
            if kid.lines.recv_timeout(DEADLINE).as_deref() != Ok("DONE") {
                let _ = kid.child.kill();
                panic!("a side did not finish: {:?}", kid.child.wait());
            }
        }
        a.finish();
        b.finish();
        // Region, near staging file, directory (and the far file without CMA), twice.
        assert!(refused >= 6, "{refused} attempts refused, env {env:?}");
        assert_eq!(done, 0, "{done} resizes succeeded, env {env:?}");
    }
}

/// RMA and atomics between processes: results, error entries for a wrong key, out of
/// range and no permission, and the target's memory exactly as the model says.
#[test]
fn rma_and_atomics_across_processes() {
    for (stack, env) in [
        ("default", &[][..]),
        ("safe_auto", &[][..]),
        ("domain_map", &[][..]),
        ("default", &[("FABRIC_SHM_CMA", "0")][..]),
    ] {
        let mut t = Kid::spawn("rma_target", stack, env);
        let mut d = Kid::spawn("drive_rma", stack, env);
        let nt = t.expect("NAME");
        let nd = d.expect("NAME");
        t.say(&format!("PEER {nd}"));
        d.say(&format!("PEER {nt}"));
        let want = d.expect("WANT");
        t.say("STOP");
        assert_eq!(t.expect("DIGEST"), want, "stack {stack} env {env:?}");
        t.finish();
        d.finish();
    }
}

/// A peer killed with SIGKILL while sends, RMA and atomics wait on it: every pending
/// operation completes with an error entry within a bounded time, later sends fail, and
/// nothing is left in /dev/shm.
#[test]
fn peer_killed_mid_stream() {
    type S = Stack<Shm>;
    let before = shm_files();
    // Buffers the node may write are declared before it, so they outlive it.
    let mut reads = [[0u8; 64]; 8];
    let mut fetched = [[0u8; 8]; 8];
    let mut kid = Kid::spawn("hold", "default", &[]);
    let n = node::<S>();
    let name = unhex(&kid.expect("NAME"));
    let peer = n.av.insert(&name).unwrap();
    kid.say(&format!("PEER {}", hex(&n.ep.name())));
    kid.expect("HOLDING");
    let big = pattern(100_000, 1);
    let mut pending = 0usize;
    for i in 0..8usize {
        let msg = TaggedMsg {
            iov: &[if i % 2 == 0 { &big[..] } else { &big[..8] }],
            addr: peer,
            tag: i as u64,
            context: Context(100 + i),
            data: 0,
        };
        n.ep.tsendmsg(&msg, OpFlags::DELIVERY_COMPLETE).unwrap();
        // 512 bytes (10 cells): everything posted here fits the peer's ring, of which
        // requests may take 192 cells by default.
        n.ep.write(&big[..512], peer, 0, 1, Context(200 + i))
            .unwrap();
        pending += 2;
    }
    for (i, r) in reads.iter_mut().enumerate() {
        // SAFETY: the buffers outlive the node (declared before it is dropped at the
        // end of the test, after every completion was read).
        unsafe { n.ep.read(r, peer, 0, 1, Context(300 + i)).unwrap() };
        pending += 1;
    }
    for (i, f) in fetched.iter_mut().enumerate() {
        // SAFETY: as above.
        unsafe {
            n.ep.fetch_atomic(
                &1u64.to_ne_bytes(),
                f,
                Datatype::Uint64,
                AtomicOp::Sum,
                peer,
                0,
                1,
                Context(400 + i),
            )
            .unwrap()
        };
        pending += 1;
    }
    // Nothing completes while the peer holds.
    let mut e = [CqTaggedEntry::default(); 4];
    for _ in 0..1000 {
        n.domain.progress();
    }
    assert_eq!(n.cq.read(&mut e), Err(Error::Again));
    // SIGKILL mid-stream.
    kid.child.kill().unwrap();
    kid.child.wait().unwrap();
    let killed = Instant::now();
    let mut errors = 0;
    while errors < pending {
        match n.cq.read(&mut e) {
            Err(Error::Avail) => {
                let err = n.cq.read_err().unwrap();
                assert_eq!(err.err, Error::HostUnreach, "{err:?}");
                errors += 1;
            }
            Ok(k) => panic!("{k} successful completions from a dead peer: {:?}", &e[..k]),
            Err(Error::Again) => {}
            Err(err) => panic!("{err}"),
        }
        n.domain.progress();
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "only {errors} of {pending} operations failed within 5 s of the kill"
        );
    }
    let took = killed.elapsed();
    eprintln!("all {pending} pending operations failed {took:?} after SIGKILL");
    // Later sends fail at once or with an error entry; nothing hangs.
    match n.ep.tsend(&big[..8], peer, 1, Context(500)) {
        Err(Error::HostUnreach) => {}
        Ok(()) => {}
        Err(e) => panic!("send to a dead peer: {e}"),
    }
    assert_eq!(shm_files(), before, "files left in /dev/shm");
}

/// A sender flooding a receiver that posts nothing: it sees EAGAIN, memory stays
/// bounded, and once receives are posted every message arrives exactly once, in order.
#[test]
fn flood_backpressure_then_all_delivered() {
    type S = Stack<Shm>;
    let my_rss = || -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
            })
            .unwrap_or(0)
    };
    let mut kid = Kid::spawn("flood", "default", &[]);
    let n = node::<S>();
    let name = unhex(&kid.expect("NAME"));
    let peer = n.av.insert(&name).unwrap();
    kid.say(&format!("PEER {}", hex(&n.ep.name())));
    let rss0 = my_rss();
    // Progress without receives until the sender is blocked.
    let blocked_at: u64 = loop {
        n.domain.progress();
        if let Ok(l) = kid.lines.try_recv() {
            let at = l
                .strip_prefix("BLOCKED")
                .expect("BLOCKED")
                .trim()
                .parse()
                .unwrap();
            break at;
        }
    };
    assert!(blocked_at < FLOOD, "the sender never saw EAGAIN");
    for _ in 0..10_000 {
        n.domain.progress();
    }
    let grown = my_rss().saturating_sub(rss0);
    assert!(
        grown < 64 * 1024,
        "receiver grew by {grown} KiB while flooded"
    );
    // Now receive everything, in order, once.
    let mut buf = [0u8; 64];
    for i in 0..FLOOD {
        // SAFETY: `buf` is read only after this receive's completion.
        unsafe { n.ep.trecv(&mut buf, peer, i, 0, Context(1)).unwrap() };
        let e = next(&n).expect("receive");
        assert_eq!(e.tag, i);
        assert_eq!(&buf[..], &pattern(64, i)[..], "message {i}");
    }
    let again: u64 = kid.expect("SENT").parse().unwrap();
    assert!(again >= 1000);
    // Nothing more arrives.
    let mut e = [CqTaggedEntry::default(); 1];
    for _ in 0..1000 {
        n.domain.progress();
    }
    assert_eq!(n.cq.read(&mut e), Err(Error::Again));
    kid.say("BYE");
    kid.finish();
}

/// Rendezvous sends to a receiver that posts (and polls) only after they returned: the
/// sender stages each payload after its bound, and the data arrives exact although
/// the caller's buffers are gone.
#[test]
fn rendezvous_to_a_late_receiver() {
    for stack in ["default", "safe_auto"] {
        let mut s = Kid::spawn("rndv_send", stack, &[]);
        let mut r = Kid::spawn("late_recv", stack, &[]);
        let ns = s.expect("NAME");
        let nr = r.expect("NAME");
        s.say(&format!("PEER {nr}"));
        r.say(&format!("PEER {ns}"));
        r.expect("READY");
        s.say("GO");
        let took = s.expect("SENT");
        eprintln!("{stack}: rendezvous sends to a late receiver took {took}");
        r.say("GO");
        r.expect("DONE");
        s.say("BYE");
        r.finish();
        s.finish();
    }
}

/// The receiver of a rendezvous send is killed while the sender waits in the send call
/// (its bound set far beyond the test): the call returns `HostUnreach` soon after.
#[test]
fn rendezvous_sender_survives_a_killed_receiver() {
    let mut h = Kid::spawn("hold", "default", &[]);
    let mut s = Kid::spawn(
        "rndv_to_dying",
        "default",
        &[("FABRIC_SHM_RNDV_WAIT_US", "60000000")],
    );
    let nh = h.expect("NAME");
    let ns = s.expect("NAME");
    h.say(&format!("PEER {ns}"));
    s.say(&format!("PEER {nh}"));
    h.expect("HOLDING");
    s.say("GO");
    s.expect("SENDING");
    std::thread::sleep(Duration::from_millis(300));
    h.child.kill().unwrap();
    h.child.wait().unwrap();
    let killed = Instant::now();
    let res = s.expect("RESULT");
    let waited = killed.elapsed();
    let mut it = res.split_whitespace();
    assert_eq!(it.next(), Some("HostUnreach"), "{res}");
    let ms: u64 = it.next().unwrap().parse().unwrap();
    assert!(ms >= 250, "the send returned before the kill: {res}");
    assert!(
        waited < Duration::from_secs(5),
        "returned {waited:?} after the kill"
    );
    s.finish();
}
