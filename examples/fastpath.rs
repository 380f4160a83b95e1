//! A fixed number of `tinject` + receiver CQ reads on the loopback (or shm) provider, for counting
//! instructions per message with callgrind (`benches/fastpath_callgrind.sh`).
//!
//! Usage: `fastpath [messages] [slice|array|dynamic|shm|fadd|add|cswap|idle|hybrid|hybrid_idle] [domain|safe]` (default 100000,
//! `slice`, `domain`). One message = `trecv` repost + `tinject` of 8 bytes + one
//! `cq.read` that progresses, matches and returns the entry.
//!
//! * `slice`: the static stack (`Stack<Loopback>`: ThreadDomain, Manual, CqTagged,
//!   Table), `tinject` of a slice.
//! * `array`: the same with `tinject_array` (length proven at compile time, no run-time
//!   length test).
//! * `dynamic`: the same loop through run-time dispatch: `Registry<(Loopback,)>` getinfo
//!   and fabric, `Dyn*` objects with the same choices (threading, manual progress, tagged
//!   CQ read into `CqTaggedEntry`s, Table AV).
//!
//! * `shm`: `slice` on the shm provider (`Stack<Shm>`), the endpoint sending to itself
//!   through its own shared-memory receive FIFO: the whole per-message path of a
//!   two-process run (cell write, poll, match, copy, completions) in one deterministic
//!   thread.
//! * `fadd`: on shm, `fetch_atomic` (`FI_SUM` of 1 on one `u64`) into the endpoint's
//!   own registered word, polled to its completion: initiator, target and response
//!   in one thread.
//! * `add`: on shm (with a Data CQ, so that its code is compiled apart from the other
//!   modes'), `atomic` (`FI_SUM` of 1 on one `u64`, no fetch) into the endpoint's own
//!   registered word, polled to its completion (the target's acknowledgement).
//! * `cswap`: on shm (with a Msg CQ, for the same reason), `compare_atomic`
//!   (`FI_CSWAP` of one `u64`: the word goes from `i` to `i + 1`), polled to its
//!   completion, the fetched old value checked.
//! * `idle`: on shm (with a Map AV, so that its code is compiled apart from `shm`'s),
//!   after one message, reads of the empty CQ: the cost of one look for work, which
//!   sets how soon a busy-polling receiver notices an arrival.
//!
//! * `hybrid`: `shm` on the composed provider (`Stack<fabric_hybrid::ShmTcp>`), the
//!   endpoint on this node and so reached through its shm half.
//! * `hybrid_idle`: `idle` on the composed provider: a look at the shm half, and at
//!   the tcp half while due.
//!
//! `safe` uses `FI_THREAD_SAFE` instead (`Stack<Loopback, ThreadSafe, Manual>` / the
//! dynamic layer's thread-safe stack); `array` has no dynamic counterpart.

use fabric::dynamic::prelude::*;
use fabric::dynamic::{Choice, DynCq, DynEndpoint};
use fabric::prelude::*;
use fabric::Config;
use fabric_hybrid::ShmTcp;
use fabric_loopback::Loopback;
use fabric_shm::Shm;

fn hints(threading: ThreadingLevel) -> Hints {
    Hints::new()
        .caps(Caps::TAGGED)
        .ep_type(EpType::Rdm)
        .threading(threading)
}

/// Checks the sum of the received payloads: message `i` carries `i`, so it is
/// `0 + 1 + .. + (n - 1)` when every message arrived intact.
fn finish(n: u64, sum: u64) -> Result<()> {
    if sum != n * n.saturating_sub(1) / 2 {
        eprintln!("checksum mismatch: {sum}");
        return Err(Error::Other);
    }
    println!("{n} messages, checksum ok");
    Ok(())
}

/// One enabled endpoint of stack `S` with one CQ for both directions and its own
/// address in a Table AV: the loops below send to themselves.
struct Loop<S: Config> {
    _fabric: Fabric<S>,
    domain: Domain<S>,
    _av: AddressVector<S>,
    cq: Cq<S>,
    ep: Endpoint<S>,
    me: FiAddr,
}

impl<S: Config> Loop<S> {
    fn open(hints: &Hints) -> Result<Self> {
        let info = getinfo::<S>(Some(hints))?.remove(0);
        let fabric = Fabric::<S>::open(&info)?;
        let domain = fabric.domain(&info)?;
        let cq = domain.cq(&CqAttr::DEFAULT)?;
        let av = domain.av(&AvAttr::DEFAULT)?;
        let ep = domain.endpoint(&info)?;
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        let me = av.insert(&ep.name())?;
        Ok(Loop {
            _fabric: fabric,
            domain,
            _av: av,
            cq,
            ep,
            me,
        })
    }
}

/// Reads `cq` (which drives progress) until it returns an entry.
fn wait<S>(cq: &Cq<S>, entries: &mut [CqTaggedEntry]) -> Result<()>
where
    S: Config,
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    loop {
        match cq.read(entries) {
            Ok(_) => return Ok(()),
            Err(Error::Again) => continue,
            Err(e) => return Err(e),
        }
    }
}

fn run_static<S>(n: u64, array: bool, threading: ThreadingLevel) -> Result<()>
where
    S: Config,
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
    fabric::typenum::Const<8>: InjectFits<S::Provider>,
{
    // Kept whole: every object stays open until the loop ends.
    let l = Loop::<S>::open(&hints(threading))?;
    let (cq, ep, me) = (&l.cq, &l.ep, l.me);
    let mut buf = [0u8; 8];
    let mut entries = [CqTaggedEntry::default(); 4];
    let mut sum = 0u64;
    for i in 0..n {
        // SAFETY: `buf` lives across the loop and is read only after the completion.
        unsafe { ep.trecv(&mut buf, FiAddr::UNSPEC, 42, 0, Context(1))? };
        if array {
            ep.tinject_array(&i.to_le_bytes(), me, 42)?;
        } else {
            ep.tinject(&i.to_le_bytes(), me, 42)?;
        }
        wait(cq, &mut entries)?;
        sum = sum.wrapping_add(u64::from_le_bytes(buf));
    }
    finish(n, sum)
}

/// `word` registered on `l`'s domain for remote reads and writes (the atomics' target).
fn remote_rw<'a, S: Config>(l: &Loop<S>, word: &'a mut [u8; 8]) -> Result<MemoryRegion<'a, S>> {
    let attr = MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        ..MrAttr::DEFAULT
    };
    l.domain.mr_reg(word, &attr)
}

fn run_fadd<S>(n: u64, threading: ThreadingLevel) -> Result<()>
where
    S: Config,
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let l = Loop::<S>::open(&hints(threading).caps(Caps::TAGGED | Caps::ATOMIC))?;
    let (cq, ep, me) = (&l.cq, &l.ep, l.me);
    let mut word = [0u8; 8];
    let mr = remote_rw(&l, &mut word)?;
    let (addr, key) = (mr.remote_addr(), mr.key());
    let one = 1u64.to_le_bytes();
    let mut old = [0u8; 8];
    let mut entries = [CqTaggedEntry::default(); 4];
    let mut sum = 0u64;
    for _ in 0..n {
        // SAFETY: `old` lives across the loop and is read only after the completion.
        unsafe {
            ep.fetch_atomic(
                &one,
                &mut old,
                Datatype::Uint64,
                AtomicOp::Sum,
                me,
                addr,
                key,
                Context(1),
            )?
        };
        wait(cq, &mut entries)?;
        sum = sum.wrapping_add(u64::from_le_bytes(old));
    }
    finish(n, sum)
}

/// Reads `cq` (which drives progress) until it returns an entry, whatever its format.
fn wait_any<S: Config>(cq: &Cq<S>, entries: &mut [<S::Cq as CqFormat>::Entry]) -> Result<()> {
    loop {
        match cq.read(entries) {
            Ok(_) => return Ok(()),
            Err(Error::Again) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `n` base atomics (`cswap` false: `FI_SUM` of 1) or compare atomics (`cswap` true:
/// `FI_CSWAP` of `i` for `i + 1`, the fetched old values summed) on one registered
/// `u64` of the endpoint itself, each polled to its completion; the word ends at `n`.
fn run_amo<S: Config>(n: u64, cswap: bool, threading: ThreadingLevel) -> Result<()> {
    let l = Loop::<S>::open(&hints(threading).caps(Caps::TAGGED | Caps::ATOMIC))?;
    let (cq, ep, me) = (&l.cq, &l.ep, l.me);
    let mut word = [0u8; 8];
    let mr = remote_rw(&l, &mut word)?;
    let (addr, key) = (mr.remote_addr(), mr.key());
    let mut old = [0u8; 8];
    let mut entries = [<S::Cq as CqFormat>::Entry::default(); 4];
    let mut sum = 0u64;
    for i in 0..n {
        if cswap {
            // SAFETY: `old` lives across the loop and is read only after the completion.
            unsafe {
                ep.compare_atomic(
                    &(i + 1).to_le_bytes(),
                    &i.to_le_bytes(),
                    &mut old,
                    Datatype::Uint64,
                    AtomicOp::Cswap,
                    me,
                    addr,
                    key,
                    Context(1),
                )?
            };
        } else {
            ep.atomic(
                &1u64.to_le_bytes(),
                Datatype::Uint64,
                AtomicOp::Sum,
                me,
                addr,
                key,
                Context(1),
            )?;
        }
        wait_any(cq, &mut entries)?;
        sum = sum.wrapping_add(u64::from_le_bytes(old));
    }
    drop(mr);
    let last = u64::from_le_bytes(word);
    if last != n {
        eprintln!("target word {last}, expected {n}");
        return Err(Error::Other);
    }
    if cswap {
        // Every swap found the word at its `i`.
        finish(n, sum)
    } else {
        println!("{n} atomics, target word ok");
        Ok(())
    }
}

/// `n` reads of an empty CQ on shm, each of which must answer `Again`: the cost of one
/// look for work, which sets how soon a busy-polling receiver notices an arrival.
fn run_idle<S>(n: u64, threading: ThreadingLevel) -> Result<()>
where
    S: Config,
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let l = Loop::<S>::open(&hints(threading))?;
    let mut entries = [CqTaggedEntry::default(); 4];
    // One message first, so the receive ring has a channel in use as in a ping-pong.
    let mut buf = [0u8; 8];
    // SAFETY: `buf` outlives the receive, which completes in `wait` below.
    unsafe { l.ep.trecv(&mut buf, FiAddr::UNSPEC, 42, 0, Context(1))? };
    l.ep.tinject(&[1; 8], l.me, 42)?;
    wait(&l.cq, &mut entries)?;
    for _ in 0..n {
        match l.cq.read(&mut entries) {
            Err(Error::Again) => {}
            Ok(_) => {
                eprintln!("an entry arrived on an idle endpoint");
                return Err(Error::Other);
            }
            Err(e) => return Err(e),
        }
    }
    println!("{n} empty reads");
    Ok(())
}

fn run_dynamic(n: u64, threading: ThreadingLevel) -> Result<()> {
    type Net = Registry<(Loopback,)>;
    let info = Net::getinfo(Some(&hints(threading)))?.remove(0);
    let fabric = Net::fabric(&info)?;
    let want = Choice {
        provider: "loopback",
        threading,
        progress: ProgressMode::Manual,
        av_type: AvKind::Table,
    };
    if fabric.choice() != want {
        eprintln!("unexpected stack {:?}", fabric.choice());
        return Err(Error::Other);
    }
    let domain = fabric.domain(&info)?;
    let cq: DynCq = domain.cq(&CqAttr {
        format: CqFormatKind::Tagged,
        ..CqAttr::DEFAULT
    })?;
    let av = domain.av(&AvAttr::DEFAULT)?;
    let ep: DynEndpoint = domain.endpoint(&info)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_av(&av)?;
    ep.enable()?;
    let me = av.insert(&ep.name())?;
    let mut buf = [0u8; 8];
    let mut entries = [CqTaggedEntry::default(); 4];
    let mut sum = 0u64;
    for i in 0..n {
        // SAFETY: `buf` lives across the loop and is read only after the completion.
        unsafe { ep.trecv(&mut buf, FiAddr::UNSPEC, 42, 0, Context(1))? };
        ep.tinject(&i.to_le_bytes(), me, 42)?;
        loop {
            match cq.read(&mut entries[..]) {
                Ok(_) => break,
                Err(Error::Again) => continue,
                Err(e) => return Err(e),
            }
        }
        sum = sum.wrapping_add(u64::from_le_bytes(buf));
    }
    finish(n, sum)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mode = args.get(2).map_or("slice", String::as_str);
    let threading = match args.get(3).map_or("domain", String::as_str) {
        "domain" => ThreadingLevel::Domain,
        "safe" => ThreadingLevel::Safe,
        other => {
            eprintln!("unknown threading {other:?}: domain or safe");
            return Err(Error::Inval);
        }
    };
    let safe = threading == ThreadingLevel::Safe;
    match (mode, safe) {
        ("slice" | "array", false) => run_static::<Stack<Loopback>>(n, mode == "array", threading),
        ("slice" | "array", true) => {
            run_static::<Stack<Loopback, ThreadSafe, Manual>>(n, mode == "array", threading)
        }
        ("shm", false) => run_static::<Stack<Shm>>(n, false, threading),
        ("shm", true) => run_static::<Stack<Shm, ThreadSafe, Manual>>(n, false, threading),
        ("fadd", false) => run_fadd::<Stack<Shm>>(n, threading),
        ("fadd", true) => run_fadd::<Stack<Shm, ThreadSafe, Manual>>(n, threading),
        // Their own CQ formats give the atomic modes their own copies of the stack's
        // code, as the Map AV does for `idle` below.
        ("add", false) => run_amo::<Stack<Shm, ThreadDomain, Manual, CqData>>(n, false, threading),
        ("add", true) => run_amo::<Stack<Shm, ThreadSafe, Manual, CqData>>(n, false, threading),
        ("cswap", false) => run_amo::<Stack<Shm, ThreadDomain, Manual, CqMsg>>(n, true, threading),
        ("cswap", true) => run_amo::<Stack<Shm, ThreadSafe, Manual, CqMsg>>(n, true, threading),
        // The Map AV (which no empty read touches) gives the idle loop its own copy of
        // the stack's code: a second caller of the same `cq.read` would change how the
        // compiler inlines it for the `shm` mode.
        ("idle", false) => {
            run_idle::<Stack<Shm, ThreadDomain, Manual, CqTagged, Map>>(n, threading)
        }
        ("idle", true) => run_idle::<Stack<Shm, ThreadSafe, Manual, CqTagged, Map>>(n, threading),
        ("hybrid", false) => run_static::<Stack<ShmTcp>>(n, false, threading),
        ("hybrid", true) => run_static::<Stack<ShmTcp, ThreadSafe, Manual>>(n, false, threading),
        ("hybrid_idle", false) => {
            run_idle::<Stack<ShmTcp, ThreadDomain, Manual, CqTagged, Map>>(n, threading)
        }
        ("hybrid_idle", true) => {
            run_idle::<Stack<ShmTcp, ThreadSafe, Manual, CqTagged, Map>>(n, threading)
        }
        ("dynamic", _) => run_dynamic(n, threading),
        _ => {
            eprintln!(
                "unknown mode {mode:?}: slice, array, dynamic, shm, fadd, add, cswap, idle, \
                 hybrid or hybrid_idle"
            );
            Err(Error::Inval)
        }
    }
}
