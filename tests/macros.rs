//! `fabric-macros` and the type-level limits.
//!
//! Compile time (`tests/ui_macros/`): a derived CQ format with a wrong field type, an
//! unknown field or no `#[repr(C)]`, `direct!` with an unknown provider, and an array
//! inject larger than the provider's `InjectSize` must NOT compile; `pass_*.rs` must
//! compile and run. Regenerate the expected diagnostics with
//! `TRYBUILD=overwrite cargo test -p fabric --test macros`.
//!
//! Run time: derived formats in real loopback exchanges fill exactly their fields
//! (`src` with `FI_SOURCE`), `direct!` picks the build-time provider, and array injects
//! deliver like slice injects.

use fabric::prelude::*;
use fabric::Config;
use fabric_loopback::Loopback;

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui_macros/cq_*.rs");
    t.compile_fail("tests/ui_macros/direct_*.rs");
    t.compile_fail("tests/ui_macros/inject_*.rs");
    t.pass("tests/ui_macros/pass_*.rs");
}

/// Tag, context, source and length, in an order of its own.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, fabric::CqFormat)]
#[repr(C)]
struct TagSrc {
    tag: u64,
    src: FiAddr,
    context: Context,
    len: usize,
}

/// The other three fields: flags, buf, data.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq, fabric::CqFormat)]
#[repr(C)]
struct FlagsBufData {
    flags: CqFlags,
    buf: usize,
    data: u64,
}

struct Pair<S: Config> {
    _fabric: Fabric<S>,
    domain: Domain<S>,
    _av: AddressVector<S>,
    a: Endpoint<S>,
    a_cq: Cq<S>,
    b: Endpoint<S>,
    b_cq: Cq<S>,
    /// `b`'s address in the shared AV.
    to_b: FiAddr,
    /// `a`'s address in the shared AV (what `FI_SOURCE` reports at `b`).
    a_addr: FiAddr,
}

fn pair<S: Config>(caps: Caps) -> Pair<S> {
    let hints = Hints::new().caps(caps).ep_type(EpType::Rdm);
    let info = getinfo::<S>(Some(&hints)).unwrap().remove(0);
    assert!(info.caps.contains(caps), "{:?}", info.caps);
    let fabric = Fabric::<S>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let mk = || {
        let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
        let ep = domain.endpoint(&info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
            .unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        (ep, cq)
    };
    let (a, a_cq) = mk();
    let (b, b_cq) = mk();
    let a_addr = av.insert(&a.name()).unwrap();
    let to_b = av.insert(&b.name()).unwrap();
    Pair {
        _fabric: fabric,
        domain,
        _av: av,
        a,
        a_cq,
        b,
        b_cq,
        to_b,
        a_addr,
    }
}

type Entry<S> = <<S as Config>::Cq as CqFormat>::Entry;

/// One entry from `cq` with its `fi_cq_readfrom` source, within a bounded number of polls.
fn one_from<S: Config>(cq: &Cq<S>) -> (Entry<S>, FiAddr) {
    let mut e = [Entry::<S>::default(); 1];
    let mut src = [FiAddr(0); 1];
    for _ in 0..100_000 {
        match cq.read_from(&mut e, &mut src) {
            Ok(1) => return (e[0], src[0]),
            Ok(n) => panic!("{n} entries from a 1-entry read"),
            Err(Error::Again) => {}
            Err(err) => panic!("{err}"),
        }
    }
    panic!("no completion");
}

#[test]
fn derived_format_tag_src_context_len() {
    type Net = Stack<Loopback, ThreadDomain, Manual, TagSrc>;
    assert_eq!(
        core::mem::size_of::<TagSrc>(),
        32,
        "only the declared fields"
    );
    let p = pair::<Net>(Caps::TAGGED | Caps::SOURCE);
    let mut buf = [0u8; 16];
    // SAFETY: `buf` outlives the receive, which completes below.
    unsafe { p.b.trecv(&mut buf, FiAddr::UNSPEC, 0x77, 0, Context(5)) }.unwrap();
    p.a.tsend(b"hello", p.to_b, 0x77, Context(9)).unwrap();
    let (rx, rx_src) = one_from(&p.b_cq);
    assert_eq!(
        rx,
        TagSrc {
            tag: 0x77,
            src: p.a_addr,
            context: Context(5),
            len: 5
        }
    );
    assert_eq!(rx_src, p.a_addr, "readfrom and the entry agree");
    assert_eq!(&buf[..5], b"hello");
    // A send completion has no source and (for a send) no tag.
    let (tx, tx_src) = one_from(&p.a_cq);
    assert_eq!(
        tx,
        TagSrc {
            tag: 0,
            src: FiAddr::NOTAVAIL,
            context: Context(9),
            len: 5
        }
    );
    assert_eq!(tx_src, FiAddr::NOTAVAIL);
    let _ = &p.domain;
}

#[test]
fn derived_format_without_fi_source_reports_notavail() {
    type Net = Stack<Loopback, ThreadDomain, Manual, TagSrc>;
    let p = pair::<Net>(Caps::TAGGED);
    let mut buf = [0u8; 4];
    // SAFETY: as above.
    unsafe { p.b.trecv(&mut buf, FiAddr::UNSPEC, 1, 0, Context(1)) }.unwrap();
    p.a.tinject(b"abc", p.to_b, 1).unwrap();
    let (rx, _) = one_from(&p.b_cq);
    if p.b.info().caps.contains(Caps::SOURCE) {
        // The provider may grant FI_SOURCE unasked; then the source is known.
        assert_eq!(rx.src, p.a_addr);
    } else {
        assert_eq!(rx.src, FiAddr::NOTAVAIL);
    }
    assert_eq!((rx.tag, rx.context, rx.len), (1, Context(1), 3));
}

#[test]
fn derived_format_flags_buf_data() {
    type Net = Stack<Loopback, ThreadDomain, Manual, FlagsBufData>;
    assert_eq!(
        core::mem::size_of::<FlagsBufData>(),
        24,
        "only the declared fields"
    );
    let p = pair::<Net>(Caps::MSG);
    let mut buf = [0u8; 16];
    // SAFETY: as above.
    unsafe { p.b.recv(&mut buf, FiAddr::UNSPEC, Context(3)) }.unwrap();
    p.a.senddata(b"xyz", 0xdead_beef, p.to_b, Context(4))
        .unwrap();
    let (rx, _) = one_from(&p.b_cq);
    assert_eq!(
        rx,
        FlagsBufData {
            flags: CqFlags::RECV | CqFlags::MSG | CqFlags::REMOTE_CQ_DATA,
            buf: buf.as_ptr() as usize,
            data: 0xdead_beef,
        }
    );
    let (tx, _) = one_from(&p.a_cq);
    assert_eq!(
        tx,
        FlagsBufData {
            flags: CqFlags::SEND | CqFlags::MSG,
            buf: 0,
            data: 0,
        }
    );
}

/// `direct!` with no provider argument takes `FABRIC_DIRECT`, default `loopback`; this
/// workspace only has the loopback provider, so the build-time choice must be it.
#[test]
fn direct_picks_build_time_provider() {
    type Net = fabric::direct!(cq = Tagged);
    assert_eq!(<Net as Config>::Provider::NAME, "loopback");
    assert_eq!(
        option_env!("FABRIC_DIRECT").unwrap_or("loopback"),
        "loopback"
    );
    let p = pair::<Net>(Caps::TAGGED);
    let mut buf = [0u8; 8];
    // SAFETY: as above.
    unsafe { p.b.trecv(&mut buf, FiAddr::UNSPEC, 2, 0, Context(2)) }.unwrap();
    p.a.tinject(b"direct", p.to_b, 2).unwrap();
    let (e, _) = one_from(&p.b_cq);
    assert_eq!((e.tag, e.len, e.op_context), (2, 6, Context(2)));
}

#[test]
fn array_injects_deliver() {
    type Net = Stack<Loopback, ThreadDomain, Manual, CqData>;
    let p = pair::<Net>(Caps::MSG | Caps::TAGGED);
    let mut t = [0u8; 8];
    let mut m = [0u8; 8];
    // SAFETY: as above.
    unsafe { p.b.trecv(&mut t, FiAddr::UNSPEC, 3, 0, Context(1)) }.unwrap();
    // SAFETY: as above.
    unsafe { p.b.recv(&mut m, FiAddr::UNSPEC, Context(2)) }.unwrap();
    p.a.tinjectdata_array(b"tagged!!", 42, p.to_b, 3).unwrap();
    p.a.inject_array(&[7u8; 4], p.to_b).unwrap();
    let (e, _) = one_from(&p.b_cq);
    assert_eq!((e.op_context, e.len, e.data), (Context(1), 8, 42));
    let (e, _) = one_from(&p.b_cq);
    assert_eq!((e.op_context, e.len), (Context(2), 4));
    assert_eq!((&t, &m[..4]), (b"tagged!!", &[7u8; 4][..]));
    // Injects complete nothing at the sender.
    let mut none = [CqDataEntry::default(); 1];
    assert_eq!(p.a_cq.read(&mut none), Err(Error::Again));
    // A full-size array (the limit itself) goes through.
    let big = [1u8; fabric_loopback::INJECT_SIZE];
    let mut rbig = vec![0u8; fabric_loopback::INJECT_SIZE];
    // SAFETY: as above.
    unsafe { p.b.recv(&mut rbig, FiAddr::UNSPEC, Context(3)) }.unwrap();
    p.a.inject_array(&big, p.to_b).unwrap();
    let (e, _) = one_from(&p.b_cq);
    assert_eq!(
        (e.op_context, e.len),
        (Context(3), fabric_loopback::INJECT_SIZE)
    );
    assert!(rbig.iter().all(|&x| x == 1));
}

#[test]
fn inject_size_type_and_const_agree() {
    use fabric::typenum::Unsigned;
    assert_eq!(
        <<Loopback as Provider>::InjectSize as Unsigned>::USIZE,
        <Loopback as Provider>::INJECT_SIZE
    );
    assert_eq!(<Loopback as Provider>::INJECT_SIZE, 4096);
    let info = getinfo::<Stack<Loopback>>(None).unwrap().remove(0);
    assert_eq!(info.tx_attr.inject_size, 4096);
}
