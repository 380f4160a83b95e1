//! Shared scaffolding of the conformance suites: node and pair setup over any stack,
//! format-independent views of CQ entries, bounded waits that drive progress on the
//! peers, and the macros that instantiate one generic test body for a matrix of stacks.
//!
//! Every wait here is bounded by [`DEADLINE`] and panics with a description of what it
//! waited for, so a broken provider fails a test instead of hanging the suite.
#![allow(dead_code, unused_macros, unused_imports)]

use std::time::{Duration, Instant};

use fabric::attr::{AvAttr, CntrAttr, CqAttr, EpType, WaitObj};
use fabric::flags::{BindFlags, Caps, CqFlags};
use fabric::prelude::ConstDefault;
use fabric::{
    getinfo, AddressVector, Config, Context, Counter, Cq, CqDataEntry, CqEntry, CqFormat,
    CqMsgEntry, CqTaggedEntry, Domain, Endpoint, Error, Fabric, FiAddr, Hints, Info, Progress,
};

pub use fabric::CqErrEntry;

/// How long any helper waits for something that should happen before it panics.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// How long [`assert_cq_empty`] keeps driving progress before deciding nothing comes.
pub const QUIET: Duration = Duration::from_millis(20);

/// The CQ entry type of stack `S`.
pub type Entry<S> = <<S as Config>::Cq as CqFormat>::Entry;

/// Format-independent read access to a CQ entry: `None` where the format lacks the field.
pub trait EntryView: Copy + Default + std::fmt::Debug {
    /// `op_context`.
    fn context(&self) -> Context;
    /// `flags` (`None` for `FI_CQ_FORMAT_CONTEXT`).
    fn flags(&self) -> Option<CqFlags>;
    /// `len` (`None` for `FI_CQ_FORMAT_CONTEXT`).
    fn len(&self) -> Option<usize>;
    /// `buf` (data and tagged formats).
    fn buf(&self) -> Option<usize>;
    /// `tag` (tagged format only).
    fn tag(&self) -> Option<u64>;
    /// `data` (data and tagged formats).
    fn data(&self) -> Option<u64>;
}

impl EntryView for CqEntry {
    fn context(&self) -> Context {
        self.op_context
    }
    fn flags(&self) -> Option<CqFlags> {
        None
    }
    fn len(&self) -> Option<usize> {
        None
    }
    fn buf(&self) -> Option<usize> {
        None
    }
    fn tag(&self) -> Option<u64> {
        None
    }
    fn data(&self) -> Option<u64> {
        None
    }
}

impl EntryView for CqMsgEntry {
    fn context(&self) -> Context {
        self.op_context
    }
    fn flags(&self) -> Option<CqFlags> {
        Some(self.flags)
    }
    fn len(&self) -> Option<usize> {
        Some(self.len)
    }
    fn buf(&self) -> Option<usize> {
        None
    }
    fn tag(&self) -> Option<u64> {
        None
    }
    fn data(&self) -> Option<u64> {
        None
    }
}

impl EntryView for CqDataEntry {
    fn context(&self) -> Context {
        self.op_context
    }
    fn flags(&self) -> Option<CqFlags> {
        Some(self.flags)
    }
    fn len(&self) -> Option<usize> {
        Some(self.len)
    }
    fn buf(&self) -> Option<usize> {
        Some(self.buf)
    }
    fn tag(&self) -> Option<u64> {
        None
    }
    fn data(&self) -> Option<u64> {
        Some(self.data)
    }
}

impl EntryView for CqTaggedEntry {
    fn context(&self) -> Context {
        self.op_context
    }
    fn flags(&self) -> Option<CqFlags> {
        Some(self.flags)
    }
    fn len(&self) -> Option<usize> {
        Some(self.len)
    }
    fn buf(&self) -> Option<usize> {
        Some(self.buf)
    }
    fn tag(&self) -> Option<u64> {
        Some(self.tag)
    }
    fn data(&self) -> Option<u64> {
        Some(self.data)
    }
}

/// A CQ format whose entries the helpers can inspect.
pub trait ViewFormat: CqFormat<Entry: EntryView> {}
impl<F: CqFormat<Entry: EntryView>> ViewFormat for F {}

/// The bound of every generic conformance test: a stack whose CQ entries have an
/// [`EntryView`].
pub trait Conf: Config<Cq: ViewFormat> {}
impl<S: Config<Cq: ViewFormat>> Conf for S {}

/// Whether `S` runs a progress thread.
pub fn is_auto<S: Config>() -> bool {
    <S::Progress as Progress>::AUTO
}

/// One endpoint with everything bound: CQ (transmit and receive), a transmit-side and a
/// receive-side counter, and an AV.
pub struct Node<S: Config> {
    /// The fabric.
    pub fabric: Fabric<S>,
    /// The domain (its own; call `domain.progress()` to drive this node by hand).
    pub domain: Domain<S>,
    /// CQ bound with `TRANSMIT | RECV`, `wait_obj: Unspec` (so `sread` works).
    pub cq: Cq<S>,
    /// The AV bound to `ep`.
    pub av: AddressVector<S>,
    /// The enabled endpoint.
    pub ep: Endpoint<S>,
    /// Counter bound with `TRANSMIT | WRITE | READ`.
    pub cntr_tx: Counter<S>,
    /// Counter bound with `RECV | REMOTE_WRITE | REMOTE_READ`.
    pub cntr_rx: Counter<S>,
    /// The info everything was opened with (after the tweak).
    pub info: Info,
}

/// Capabilities the suites ask for: every primary capability the loopback provider
/// offers plus the secondary ones tests rely on (`FI_SOURCE`, `FI_DIRECTED_RECV`, ...).
pub const TEST_CAPS: Caps = Caps::MSG
    .union(Caps::TAGGED)
    .union(Caps::RMA)
    .union(Caps::ATOMIC)
    .union(Caps::MULTI_RECV)
    .union(Caps::TRIGGER)
    .union(Caps::FENCE)
    .union(Caps::RMA_EVENT)
    .union(Caps::SOURCE)
    .union(Caps::DIRECTED_RECV)
    .union(Caps::NAMED_RX_CTX)
    .union(Caps::SHARED_AV);

/// The first RDM info `getinfo` returns for `S` with [`TEST_CAPS`] requested.
pub fn rdm_info<S: Config>() -> Info {
    info_for::<S>(EpType::Rdm)
}

/// The first info of endpoint type `ep_type` with [`TEST_CAPS`] requested.
pub fn info_for<S: Config>(ep_type: EpType) -> Info {
    let hints = Hints::new().caps(TEST_CAPS).ep_type(ep_type);
    let mut infos = getinfo::<S>(Some(&hints))
        .unwrap_or_else(|e| panic!("getinfo({ep_type:?}, {TEST_CAPS:?}) failed: {e}"));
    assert!(!infos.is_empty(), "getinfo returned an empty list");
    infos.remove(0)
}

/// Opens a node on its own fabric and domain from the RDM info, changed by `tweak`
/// before anything is opened.
pub fn node<S: Config>(tweak: impl FnOnce(&mut Info)) -> Node<S> {
    let mut info = rdm_info::<S>();
    tweak(&mut info);
    node_from_info(info)
}

/// Opens a node from `info` as it is.
pub fn node_from_info<S: Config>(info: Info) -> Node<S> {
    let fabric = Fabric::<S>::open(&info).expect("fi_fabric");
    node_in_fabric(fabric, info)
}

/// The CQ attributes of a default node.
pub const NODE_CQ_ATTR: CqAttr = CqAttr {
    wait_obj: WaitObj::Unspec,
    ..CqAttr::DEFAULT
};

/// Opens a node in a new domain of an existing `fabric`.
pub fn node_in_fabric<S: Config>(fabric: Fabric<S>, info: Info) -> Node<S> {
    node_full(fabric, info, &NODE_CQ_ATTR, BindFlags::empty())
}

/// As [`node`], with the CQ opened with `cq_attr` and bound with
/// `TRANSMIT | RECV | cq_bind` (e.g. `SELECTIVE_COMPLETION`).
pub fn node_with<S: Config>(
    tweak: impl FnOnce(&mut Info),
    cq_attr: &CqAttr,
    cq_bind: BindFlags,
) -> Node<S> {
    let mut info = rdm_info::<S>();
    tweak(&mut info);
    let fabric = Fabric::<S>::open(&info).expect("fi_fabric");
    node_full(fabric, info, cq_attr, cq_bind)
}

fn node_full<S: Config>(
    fabric: Fabric<S>,
    info: Info,
    cq_attr: &CqAttr,
    cq_bind: BindFlags,
) -> Node<S> {
    let domain = fabric.domain(&info).expect("fi_domain");
    let cq = domain.cq(cq_attr).expect("fi_cq_open");
    let av = domain.av(&AvAttr::DEFAULT).expect("fi_av_open");
    let cntr_tx = domain.cntr(&CntrAttr::DEFAULT).expect("fi_cntr_open (tx)");
    let cntr_rx = domain.cntr(&CntrAttr::DEFAULT).expect("fi_cntr_open (rx)");
    let ep = domain.endpoint(&info).expect("fi_endpoint");
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV | cq_bind)
        .expect("bind cq");
    ep.bind_cntr(
        &cntr_tx,
        BindFlags::TRANSMIT | BindFlags::WRITE | BindFlags::READ,
    )
    .expect("bind tx counter");
    ep.bind_cntr(
        &cntr_rx,
        BindFlags::RECV | BindFlags::REMOTE_WRITE | BindFlags::REMOTE_READ,
    )
    .expect("bind rx counter");
    ep.bind_av(&av).expect("bind av");
    ep.enable().expect("fi_enable");
    Node {
        fabric,
        domain,
        cq,
        av,
        ep,
        cntr_tx,
        cntr_rx,
        info,
    }
}

/// Two default nodes in separate domains, each with the other in its AV:
/// `(a, b, b as seen from a, a as seen from b)`.
pub fn pair<S: Config>() -> (Node<S>, Node<S>, FiAddr, FiAddr) {
    pair_with(|_| {})
}

/// As [`pair`], with `tweak` applied to both nodes' info.
pub fn pair_with<S: Config>(tweak: impl Fn(&mut Info)) -> (Node<S>, Node<S>, FiAddr, FiAddr) {
    let a = node::<S>(&tweak);
    let b = node::<S>(&tweak);
    let b_at_a = a.av.insert(&b.ep.name()).expect("insert b into a's AV");
    let a_at_b = b.av.insert(&a.ep.name()).expect("insert a into b's AV");
    (a, b, b_at_a, a_at_b)
}

/// Runs one progress pass on each domain (no-op work under auto progress, harmless).
pub fn progress_all<S: Config>(domains: &[&Domain<S>]) {
    for d in domains {
        d.progress();
    }
}

fn pause<S: Config>() {
    if is_auto::<S>() {
        std::thread::sleep(Duration::from_micros(200));
    } else {
        std::thread::yield_now();
    }
}

/// Reads one entry from `cq`, driving progress on `others` (the peers' domains) between
/// attempts. `Ok(entry)` for a completion, `Err(error entry)` for an error completion.
/// Panics after [`DEADLINE`].
pub fn wait_one<S: Config>(cq: &Cq<S>, others: &[&Domain<S>]) -> Result<Entry<S>, CqErrEntry> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut e = [Entry::<S>::default(); 1];
        match cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Ok(n) => panic!("cq.read into a 1-entry buffer returned {n}"),
            Err(Error::Avail) => return Err(cq.read_err().expect("read_err after Avail")),
            Err(Error::Again) => {}
            Err(e) => panic!("cq.read failed: {e}"),
        }
        progress_all(others);
        assert!(
            Instant::now() < deadline,
            "no completion within {DEADLINE:?}"
        );
        pause::<S>();
    }
}

/// As [`wait_one`], with the source address from `fi_cq_readfrom`.
pub fn wait_one_from<S: Config>(
    cq: &Cq<S>,
    others: &[&Domain<S>],
) -> Result<(Entry<S>, FiAddr), CqErrEntry> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut e = [Entry::<S>::default(); 1];
        let mut src = [FiAddr(0xdead); 1];
        match cq.read_from(&mut e, &mut src) {
            Ok(1) => return Ok((e[0], src[0])),
            Ok(n) => panic!("cq.read_from into a 1-entry buffer returned {n}"),
            Err(Error::Avail) => return Err(cq.read_err().expect("read_err after Avail")),
            Err(Error::Again) => {}
            Err(e) => panic!("cq.read_from failed: {e}"),
        }
        progress_all(others);
        assert!(
            Instant::now() < deadline,
            "no completion (readfrom) within {DEADLINE:?}"
        );
        pause::<S>();
    }
}

/// A successful completion; panics on an error entry or timeout.
#[track_caller]
pub fn wait_ok<S: Config>(cq: &Cq<S>, others: &[&Domain<S>]) -> Entry<S> {
    match wait_one(cq, others) {
        Ok(e) => e,
        Err(e) => panic!("expected a completion, got error entry {e:?}"),
    }
}

/// An error completion; panics on a successful entry or timeout.
#[track_caller]
pub fn wait_err<S: Conf>(cq: &Cq<S>, others: &[&Domain<S>]) -> CqErrEntry {
    match wait_one(cq, others) {
        Ok(e) => panic!("expected an error entry, got completion {e:?}"),
        Err(e) => e,
    }
}

/// `n` successful completions, in CQ order.
#[track_caller]
pub fn wait_n<S: Config>(cq: &Cq<S>, others: &[&Domain<S>], n: usize) -> Vec<Entry<S>> {
    (0..n).map(|_| wait_ok(cq, others)).collect()
}

/// Drives progress on `cq`'s domain (by reading) and `others` for [`QUIET`] and asserts
/// nothing, neither completion nor error, shows up.
#[track_caller]
pub fn assert_cq_empty<S: Conf>(cq: &Cq<S>, others: &[&Domain<S>]) {
    let end = Instant::now() + QUIET;
    loop {
        let mut e = [Entry::<S>::default(); 1];
        match cq.read(&mut e) {
            Err(Error::Again) => {}
            Ok(_) => panic!("expected an empty CQ, got {:?}", e[0]),
            Err(Error::Avail) => panic!("expected an empty CQ, got {:?}", cq.read_err()),
            Err(e) => panic!("cq.read failed: {e}"),
        }
        progress_all(others);
        if Instant::now() >= end {
            return;
        }
        pause::<S>();
    }
}

/// Waits until `cntr` reads at least `value`, driving `others`. Panics after [`DEADLINE`].
#[track_caller]
pub fn wait_cntr<S: Config>(cntr: &Counter<S>, value: u64, others: &[&Domain<S>]) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let v = cntr.read();
        if v >= value {
            return;
        }
        progress_all(others);
        assert!(
            Instant::now() < deadline,
            "counter stuck at {v}, waited for {value} for {DEADLINE:?}"
        );
        pause::<S>();
    }
}

/// Retries `f` while it returns `Err(Again)`, driving progress on `domains`.
#[track_caller]
pub fn retry<S: Config, T>(domains: &[&Domain<S>], mut f: impl FnMut() -> fabric::Result<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        match f() {
            Ok(v) => return v,
            Err(Error::Again) => {}
            Err(e) => panic!("operation failed: {e}"),
        }
        progress_all(domains);
        assert!(
            Instant::now() < deadline,
            "still Err(Again) after {DEADLINE:?}"
        );
        pause::<S>();
    }
}

/// Asserts the fields of an entry that its format has: context always, then flags
/// (containing `flags`), length, tag and data when present in the format and given.
#[track_caller]
pub fn check_entry<E: EntryView>(
    e: &E,
    ctx: Context,
    flags: CqFlags,
    len: Option<usize>,
    tag: Option<u64>,
    data: Option<u64>,
) {
    assert_eq!(e.context(), ctx, "context of {e:?}");
    if let Some(f) = e.flags() {
        assert!(f.contains(flags), "flags {f:?} of {e:?} lack {flags:?}");
    }
    if let (Some(l), Some(want)) = (e.len(), len) {
        assert_eq!(l, want, "len of {e:?}");
    }
    if let (Some(t), Some(want)) = (e.tag(), tag) {
        assert_eq!(t, want, "tag of {e:?}");
    }
    if let (Some(d), Some(want)) = (e.data(), data) {
        assert_eq!(d, want, "data of {e:?}");
    }
}

/// Instantiates generic test bodies for one stack, as module `$m`:
///
/// ```ignore
/// conformance!(default, Stack<Loopback>, [msg_send, #[ignore = "why"] tagged_peek]);
/// ```
///
/// Each listed name must be a generic `fn name<S: Conf>()` in the including file; the
/// generated `#[test] fn name()` calls `super::name::<$stack>()`.
#[macro_export]
macro_rules! conformance {
    ($m:ident, $stack:ty, [$($(#[$attr:meta])* $t:ident),* $(,)?]) => {
        mod $m {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                $(#[$attr])*
                fn $t() {
                    super::$t::<$stack>()
                }
            )*
        }
    };
}

/// Instantiates the listed generic tests for the whole stack matrix:
/// the default stack, each threading level, auto progress, each CQ format and the map AV.
///
/// | module         | stack                                                        |
/// |----------------|--------------------------------------------------------------|
/// | `default`      | `Stack<Loopback>` (ThreadDomain, Manual, CqTagged, Table)    |
/// | `safe`         | `Stack<Loopback, ThreadSafe>`                                |
/// | `thread_ep_map`| `Stack<Loopback, ThreadEndpoint, Manual, CqTagged, Map>`     |
/// | `completion`   | `Stack<Loopback, ThreadCompletion, Manual>`                  |
/// | `safe_auto`    | `Stack<Loopback, ThreadSafe, Auto>`                          |
/// | `cq_context`   | `Stack<Loopback, ThreadDomain, Manual, CqContext>`           |
/// | `cq_msg`       | `Stack<Loopback, ThreadDomain, Manual, CqMsg>`               |
/// | `cq_data`      | `Stack<Loopback, ThreadDomain, Manual, CqData>`              |
#[macro_export]
macro_rules! conformance_matrix {
    ([$($tests:tt)*]) => {
        $crate::conformance!(default, fabric::Stack<fabric_loopback::Loopback>, [$($tests)*]);
        $crate::conformance!(safe, fabric::Stack<fabric_loopback::Loopback, fabric::ThreadSafe>, [$($tests)*]);
        $crate::conformance!(
            thread_ep_map,
            fabric::Stack<fabric_loopback::Loopback, fabric::ThreadEndpoint, fabric::Manual, fabric::CqTagged, fabric::Map>,
            [$($tests)*]
        );
        $crate::conformance!(
            completion,
            fabric::Stack<fabric_loopback::Loopback, fabric::ThreadCompletion, fabric::Manual>,
            [$($tests)*]
        );
        $crate::conformance!(
            safe_auto,
            fabric::Stack<fabric_loopback::Loopback, fabric::ThreadSafe, fabric::Auto>,
            [$($tests)*]
        );
        $crate::conformance!(
            cq_context,
            fabric::Stack<fabric_loopback::Loopback, fabric::ThreadDomain, fabric::Manual, fabric::CqContext>,
            [$($tests)*]
        );
        $crate::conformance!(
            cq_msg,
            fabric::Stack<fabric_loopback::Loopback, fabric::ThreadDomain, fabric::Manual, fabric::CqMsg>,
            [$($tests)*]
        );
        $crate::conformance!(
            cq_data,
            fabric::Stack<fabric_loopback::Loopback, fabric::ThreadDomain, fabric::Manual, fabric::CqData>,
            [$($tests)*]
        );
    };
}
