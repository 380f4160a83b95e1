//! The run-time dispatch layer beyond what the conformance suites run through it:
//! provider lists (order, `FI_PROVIDER`-style filters, hints), the stack an info selects,
//! objects of different stacks, the CQ read forms, and static objects used through the
//! object-safe traits.
//!
//! A second provider, `Echo`, is the loopback transport under another name, so the
//! provider list has two real members.

use std::time::{Duration, Instant};

use fabric::dynamic::prelude::*;
use fabric::dynamic::{
    entry_size, Choice, DynCq, DynDomain, DynEndpoint, DynFabric, ProviderFilter,
};
use fabric::prelude::*;
use fabric_loopback::Loopback;

/// Loopback under the name `echo`.
enum Echo {}

impl Provider for Echo {
    const NAME: &'static str = "echo";
    const VERSION: u32 = 1 << 16;
    const MAX_MSG_SIZE: usize = fabric_loopback::MAX_MSG_SIZE;
    type InjectSize = <Loopback as Provider>::InjectSize;
    type Peer = <Loopback as Provider>::Peer;
    type Transport = <Loopback as Provider>::Transport;

    fn candidates() -> Vec<Info> {
        Loopback::candidates()
            .into_iter()
            .map(|mut i| {
                i.fabric_attr.prov_name = "echo";
                i.fabric_attr.name = "echo";
                i.domain_attr.name = "echo";
                i
            })
            .collect()
    }
    fn open(info: &Info) -> Result<Self::Transport> {
        Loopback::open(info)
    }
    fn resolve(name: &[u8]) -> Result<Self::Peer> {
        Loopback::resolve(name)
    }
    fn name_from_svc(node: &str, service: &str) -> Result<Vec<u8>> {
        Loopback::name_from_svc(node, service)
    }
    fn straddr(name: &[u8]) -> String {
        Loopback::straddr(name).replace("loopback", "echo")
    }
}

/// The list every test here opens fabrics from.
type Two = Registry<(Echo, Loopback)>;

const DEADLINE: Duration = Duration::from_secs(5);

fn rdm() -> Hints {
    Hints::new()
        .caps(Caps::MSG | Caps::TAGGED | Caps::RMA | Caps::SOURCE)
        .ep_type(EpType::Rdm)
}

fn names(infos: &[Info]) -> Vec<(&'static str, EpType)> {
    infos
        .iter()
        .map(|i| (i.fabric_attr.prov_name, i.ep_attr.ep_type))
        .collect()
}

#[test]
fn entries_best_first_in_list_order() {
    assert_eq!(Two::providers(), ["echo", "loopback"]);
    let all = Two::getinfo_filtered(None, &ProviderFilter::All).unwrap();
    assert_eq!(
        names(&all),
        [
            ("echo", EpType::Rdm),
            ("echo", EpType::Dgram),
            ("loopback", EpType::Rdm),
            ("loopback", EpType::Dgram),
        ]
    );
    // The other order lists the other provider first.
    let rev = Registry::<(Loopback, Echo)>::getinfo_filtered(None, &ProviderFilter::All).unwrap();
    assert_eq!(rev[0].fabric_attr.prov_name, "loopback");
    assert_eq!(rev[2].fabric_attr.prov_name, "echo");
    // Hints filter within each provider, keeping the order.
    let rdm_only = Two::getinfo_filtered(Some(&rdm()), &ProviderFilter::All).unwrap();
    assert_eq!(
        names(&rdm_only),
        [("echo", EpType::Rdm), ("loopback", EpType::Rdm)]
    );
    // Three and four providers (names may repeat; order is the tuple's).
    type Three = Registry<(Loopback, Echo, Loopback)>;
    assert_eq!(Three::providers(), ["loopback", "echo", "loopback"]);
    type Four = Registry<(Echo, Echo, Loopback, Echo)>;
    let four = Four::getinfo_filtered(Some(&rdm()), &ProviderFilter::All).unwrap();
    assert_eq!(
        four.iter()
            .map(|i| i.fabric_attr.prov_name)
            .collect::<Vec<_>>(),
        ["echo", "echo", "loopback", "echo"]
    );
}

#[test]
fn provider_filters_and_prov_name_hints() {
    let only = |f: &str| {
        Two::getinfo_filtered(Some(&rdm()), &ProviderFilter::parse(f)).map(|v| {
            v.iter()
                .map(|i| i.fabric_attr.prov_name)
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(only("loopback").unwrap(), ["loopback"]);
    assert_eq!(only("LOOPBACK,echo").unwrap(), ["echo", "loopback"]);
    assert_eq!(only("^loopback").unwrap(), ["echo"]);
    assert_eq!(only("^echo, loopback"), Err(Error::NoData));
    assert_eq!(only("tcp"), Err(Error::NoData));
    assert_eq!(only("").unwrap(), ["echo", "loopback"]);
    // The hints' own provider name narrows further (and `^name` excludes).
    let h = rdm().prov_name("loopback");
    let v = Two::getinfo_filtered(Some(&h), &ProviderFilter::All).unwrap();
    assert_eq!(names(&v), [("loopback", EpType::Rdm)]);
    let h = rdm().prov_name("^loopback");
    let v = Two::getinfo_filtered(Some(&h), &ProviderFilter::All).unwrap();
    assert_eq!(names(&v), [("echo", EpType::Rdm)]);
    let h = rdm().prov_name("echo");
    assert_eq!(
        Two::getinfo_filtered(Some(&h), &ProviderFilter::parse("loopback")).err(),
        Some(Error::NoData)
    );
}

#[test]
fn hints_choose_the_stack() {
    let pick = |h: Hints| {
        let info = Two::getinfo_filtered(Some(&h), &ProviderFilter::parse("loopback"))
            .unwrap()
            .remove(0);
        let f = Two::fabric(&info).unwrap();
        (info, f.choice())
    };
    // Defaults: FI_THREAD_DOMAIN, FI_PROGRESS_MANUAL, FI_AV_TABLE.
    let (info, c) = pick(rdm());
    let d = &info.domain_attr;
    assert_eq!(d.threading, ThreadingLevel::Domain);
    assert_eq!(
        (d.data_progress, d.control_progress),
        (ProgressMode::Manual, ProgressMode::Manual)
    );
    assert_eq!(d.av_type, AvKind::Table);
    assert_eq!(
        c,
        Choice {
            provider: "loopback",
            threading: ThreadingLevel::Domain,
            progress: ProgressMode::Manual,
            av_type: AvKind::Table,
        }
    );
    // Endpoint and completion threading are granted as asked, served thread-safe.
    for level in [
        ThreadingLevel::Completion,
        ThreadingLevel::Endpoint,
        ThreadingLevel::Safe,
    ] {
        let (info, c) = pick(rdm().threading(level));
        assert_eq!(info.domain_attr.threading, level);
        assert_eq!(c.threading, ThreadingLevel::Safe, "{level:?}");
    }
    let (info, c) = pick(rdm().data_progress(ProgressMode::Auto));
    assert_eq!(info.domain_attr.data_progress, ProgressMode::Auto);
    assert_eq!(c.progress, ProgressMode::Auto);
    // Auto control progress alone selects the progress thread too.
    let (_, c) = pick(rdm().control_progress(ProgressMode::Auto));
    assert_eq!(c.progress, ProgressMode::Auto);
    let (info, c) = pick(rdm().av_type(AvKind::Map));
    assert_eq!(
        (info.domain_attr.av_type, c.av_type),
        (AvKind::Map, AvKind::Map)
    );
    // The echo entry opens the echo provider.
    let info = Two::getinfo_filtered(Some(&rdm()), &ProviderFilter::All)
        .unwrap()
        .remove(0);
    assert_eq!(Two::fabric(&info).unwrap().choice().provider, "echo");
    // Unknown providers cannot be opened; no name picks the first provider.
    let mut bogus = info.clone();
    bogus.fabric_attr.prov_name = "tcp";
    assert!(matches!(Two::fabric(&bogus), Err(Error::NoDev)));
    bogus.fabric_attr.prov_name = "";
    assert_eq!(Two::fabric(&bogus).unwrap().choice().provider, "echo");
}

/// A dyn node: domain, CQ of `format`, AV, enabled endpoint.
struct Node {
    _fabric: DynFabric,
    domain: DynDomain,
    cq: DynCq,
    ep: DynEndpoint,
    av: fabric::dynamic::DynAv,
}

fn node(hints: Hints, format: CqFormatKind) -> Node {
    let info = Two::getinfo_filtered(Some(&hints), &ProviderFilter::parse("loopback"))
        .unwrap()
        .remove(0);
    let fabric = Two::fabric(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain
        .cq(&CqAttr {
            format,
            ..CqAttr::DEFAULT
        })
        .unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    Node {
        _fabric: fabric,
        domain,
        cq,
        ep,
        av,
    }
}

/// Reads into `out` until something arrives, driving `peer`.
fn read_some<B: CqBuf + ?Sized>(cq: &DynCq, out: &mut B, peer: &dyn DomainOps) -> usize {
    let end = Instant::now() + DEADLINE;
    loop {
        match cq.read(out) {
            Ok(n) => return n,
            Err(Error::Again) => {}
            Err(e) => panic!("cq.read: {e}"),
        }
        peer.progress();
        assert!(Instant::now() < end, "no completion");
        std::thread::yield_now();
    }
}

#[test]
fn objects_of_another_stack_are_refused() {
    let a = node(rdm(), CqFormatKind::Unspec);
    let b = node(rdm().threading(ThreadingLevel::Safe), CqFormatKind::Unspec);
    let c = node(rdm().av_type(AvKind::Map), CqFormatKind::Unspec);
    assert_eq!(a.ep.bind_cq(&b.cq, BindFlags::TRANSMIT), Err(Error::Domain));
    assert_eq!(a.ep.bind_av(&c.av), Err(Error::Domain));
    let cntr = b.domain.cntr(&CntrAttr::DEFAULT).unwrap();
    assert_eq!(
        a.ep.bind_cntr(&cntr, BindFlags::TRANSMIT),
        Err(Error::Domain)
    );
    let iov = [&b"x"[..]];
    let m = Msg {
        iov: &iov,
        addr: FiAddr(0),
        context: Context(1),
        data: 0,
    };
    assert_eq!(
        a.ep.sendmsg_triggered(&m, OpFlags::empty(), &cntr, 1),
        Err(Error::Domain)
    );
    let ps = a.domain.poll_set(&PollAttr::DEFAULT).unwrap();
    assert_eq!(ps.add_cq(&b.cq, Context(1)), Err(Error::Domain));
    // The same stack but another domain: the static check applies.
    let a2 = node(rdm(), CqFormatKind::Unspec);
    assert_eq!(
        a.ep.bind_cq(&a2.cq, BindFlags::TRANSMIT),
        Err(Error::Domain)
    );
    // A static CQ of the very stack behind `a`, in another domain: the static check.
    type Same = Stack<Loopback>;
    let info = getinfo::<Same>(Some(&rdm())).unwrap().remove(0);
    let sf = Fabric::<Same>::open(&info).unwrap();
    let scq = sf.domain(&info).unwrap().cq(&CqAttr::DEFAULT).unwrap();
    assert_eq!(a.ep.bind_cq(&scq, BindFlags::TRANSMIT), Err(Error::Domain));
    // In `a`'s own domain (reached by downcasting the dyn domain) it binds.
    let sd = a
        .domain
        .as_any()
        .downcast_ref::<Domain<Same>>()
        .expect("the default choice is Stack<Loopback>");
    let scq = sd.cq(&CqAttr::DEFAULT).unwrap();
    assert_eq!(a.ep.bind_cq(&scq, BindFlags::TRANSMIT), Ok(()));
    assert!(b.domain.as_any().downcast_ref::<Domain<Same>>().is_none());
}

/// Sends one tagged message with data from `a` to a receive posted at `b` into `rbuf`.
fn exchange(a: &Node, b: &Node, rbuf: &mut [u8; 8], ctx: usize) {
    let b_at_a = a.av.insert(&b.ep.name()).unwrap();
    // SAFETY: `rbuf` outlives the receive, which completes before the caller reads it.
    unsafe { b.ep.trecv(rbuf, FiAddr::UNSPEC, 0x33, 0, Context(ctx)) }.unwrap();
    a.ep.tsenddata(b"payload!", 0xd00d, b_at_a, 0x33, Context(ctx + 1))
        .unwrap();
}

/// The three read forms agree for every format: C-layout bytes, `DynEntry`, typed
/// entries; a typed buffer of another format is refused.
#[test]
fn cq_read_forms_agree_for_every_format() {
    let mut rbuf = [0u8; 8];
    for format in [
        CqFormatKind::Context,
        CqFormatKind::Msg,
        CqFormatKind::Data,
        CqFormatKind::Tagged,
    ] {
        let a = node(rdm(), CqFormatKind::Unspec);
        let b = node(rdm(), format);
        assert_eq!(b.cq.format(), format);
        assert_eq!(CqOps::format(&b.cq), format);
        assert_eq!(b.cq.entry_size(), entry_size(format));
        let want = Completion {
            context: Context(10),
            flags: CqFlags::RECV | CqFlags::TAGGED | CqFlags::REMOTE_CQ_DATA,
            len: 8,
            buf: rbuf.as_ptr() as usize,
            data: 0xd00d,
            tag: 0x33,
            src: FiAddr::NOTAVAIL,
        };
        let expect = DynEntry::make(format, &want);

        exchange(&a, &b, &mut rbuf, 10);
        let mut d = [DynEntry::default(); 2];
        assert_eq!(read_some(&b.cq, &mut d[..], &a.domain), 1);
        assert_eq!(d[0], expect, "{format:?} DynEntry");
        assert_eq!(&rbuf, b"payload!");

        exchange(&a, &b, &mut rbuf, 10);
        let mut bytes = vec![0xeeu8; entry_size(format) + 5];
        assert_eq!(read_some(&b.cq, &mut bytes[..], &a.domain), 1);
        let word = |i: usize| u64::from_ne_bytes(bytes[8 * i..8 * i + 8].try_into().unwrap());
        let c = expect.completion();
        let fields: Vec<u64> = [
            c.context.0 as u64,
            c.flags.bits(),
            c.len as u64,
            c.buf as u64,
            c.data,
            c.tag,
        ][..entry_size(format) / 8]
            .to_vec();
        let got: Vec<u64> = (0..entry_size(format) / 8).map(word).collect();
        assert_eq!(got, fields, "{format:?} C layout");
        assert_eq!(bytes[entry_size(format)..], [0xee; 5]);

        exchange(&a, &b, &mut rbuf, 10);
        let typed = match format {
            CqFormatKind::Context => {
                let mut e = [CqEntry::default(); 1];
                assert_eq!(
                    b.cq.read(&mut [CqTaggedEntry::default(); 1][..]),
                    Err(Error::Inval)
                );
                read_some(&b.cq, &mut e[..], &a.domain);
                DynEntry::Context(e[0])
            }
            CqFormatKind::Msg => {
                let mut e = [CqMsgEntry::default(); 1];
                assert_eq!(
                    b.cq.read(&mut [CqEntry::default(); 1][..]),
                    Err(Error::Inval)
                );
                read_some(&b.cq, &mut e[..], &a.domain);
                DynEntry::Msg(e[0])
            }
            CqFormatKind::Data => {
                let mut e = [CqDataEntry::default(); 1];
                assert_eq!(
                    b.cq.read(&mut [CqMsgEntry::default(); 1][..]),
                    Err(Error::Inval)
                );
                read_some(&b.cq, &mut e[..], &a.domain);
                DynEntry::Data(e[0])
            }
            _ => {
                let mut e = [CqTaggedEntry::default(); 1];
                assert_eq!(
                    b.cq.read(&mut [CqDataEntry::default(); 1][..]),
                    Err(Error::Inval)
                );
                read_some(&b.cq, &mut e[..], &a.domain);
                DynEntry::Tagged(e[0])
            }
        };
        assert_eq!(typed, expect, "{format:?} typed");

        // Format-independent reads see the format's fields only.
        exchange(&a, &b, &mut rbuf, 10);
        let mut comps = [Completion::default(); 1];
        read_some(&b.cq, &mut comps[..], &a.domain);
        assert_eq!(comps[0], c, "{format:?} completions");
        // Sender side (default format: tagged).
        let mut s = [DynEntry::default(); 8];
        let mut n = 0;
        while n < 4 {
            n += read_some(&a.cq, &mut s[n..], &b.domain);
        }
        assert!(s[..4].iter().all(|e| e.format() == CqFormatKind::Tagged
            && e.context() == Context(11)
            && e.flags().unwrap().contains(CqFlags::SEND | CqFlags::TAGGED)));
    }
}

/// Reads larger than the internal chunk return every ready entry at once, in order,
/// with source addresses.
#[test]
fn large_reads_span_chunks() {
    const N: usize = 40;
    let mut bufs = [[0u8; 4]; N];
    let a = node(rdm().av_type(AvKind::Map), CqFormatKind::Unspec);
    let b = node(rdm().av_type(AvKind::Map), CqFormatKind::Msg);
    let b_at_a = a.av.insert(&b.ep.name()).unwrap();
    let a_at_b = b.av.insert(&a.ep.name()).unwrap();
    for (i, buf) in bufs.iter_mut().enumerate() {
        // SAFETY: `bufs` outlives the receives, which complete below.
        unsafe {
            b.ep.trecv(buf, FiAddr::UNSPEC, i as u64, 0, Context(100 + i))
        }
        .unwrap();
    }
    for i in 0..N {
        a.ep.tinject(&(i as u32).to_le_bytes(), b_at_a, i as u64)
            .unwrap();
    }
    let mut out = [CqMsgEntry::default(); 64];
    let mut src = [FiAddr(0); 64];
    // One progress pass (inside the read) handles all of them.
    let n = b.cq.read_from(&mut out[..], &mut src).unwrap();
    assert_eq!(n, N);
    for i in 0..N {
        assert_eq!(out[i].op_context, Context(100 + i));
        assert_eq!((out[i].len, src[i]), (4, a_at_b));
        assert_eq!(u32::from_le_bytes(bufs[i]), i as u32);
    }
    assert_eq!(b.cq.read(&mut out[..]), Err(Error::Again));
}

/// Static objects are trait objects too: a static endpoint and a dyn one behind the same
/// `dyn EndpointOps`, a static CQ of the msg format read format independently.
#[test]
fn static_objects_through_the_traits() {
    type S = Stack<Loopback, ThreadDomain, Manual, CqMsg>;
    let info = getinfo::<S>(Some(&rdm())).unwrap().remove(0);
    let sf = Fabric::<S>::open(&info).unwrap();
    let sd = sf.domain(&info).unwrap();
    let scq = sd.cq(&CqAttr::DEFAULT).unwrap();
    let sav = sd.av(&AvAttr::DEFAULT).unwrap();
    let sep = sd.endpoint(&info).unwrap();
    let sd_ops: &dyn DomainOps = &sd;
    assert_eq!(sd_ops.info().fabric_attr.prov_name, "loopback");
    let sep_ops: &dyn EndpointOps = &sep;
    sep_ops
        .bind_cq(&scq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    sep_ops.bind_av(&sav).unwrap();
    sep_ops.enable().unwrap();

    let mut rbuf = [0u8; 4];
    let d = node(rdm(), CqFormatKind::Unspec);
    let to_d = sav.insert(&d.ep.name()).unwrap();
    let to_s = d.av.insert(&sep.name()).unwrap();
    // SAFETY: `rbuf` outlives the receive, which completes below.
    unsafe { sep_ops.trecv(&mut rbuf, FiAddr::UNSPEC, 5, 0, Context(9)) }.unwrap();
    let eps: [&dyn EndpointOps; 2] = [&sep, &d.ep];
    for (i, (ep, to)) in eps.iter().zip([to_d, to_s]).enumerate() {
        ep.tsend(b"hi", to, 5, Context(i + 1)).unwrap();
    }
    let scq_ops: &dyn CqOps = &scq;
    assert_eq!(scq_ops.format(), CqFormatKind::Msg);
    let mut got = Vec::new();
    let end = Instant::now() + DEADLINE;
    while got.len() < 2 {
        let mut c = [Completion::default(); 20];
        match scq_ops.read_completions(&mut c) {
            Ok(n) => got.extend_from_slice(&c[..n]),
            Err(Error::Again) => {}
            Err(e) => panic!("{e}"),
        }
        d.domain.progress();
        assert!(Instant::now() < end, "static CQ got {got:?}");
    }
    got.sort_by_key(|c| c.context.0);
    // The msg format has no tag, data or buf: zero.
    assert_eq!(
        got,
        [
            Completion {
                context: Context(1),
                flags: CqFlags::SEND | CqFlags::TAGGED,
                len: 2,
                ..Completion::default()
            },
            Completion {
                context: Context(9),
                flags: CqFlags::RECV | CqFlags::TAGGED,
                len: 2,
                ..Completion::default()
            }
        ]
    );
    assert_eq!(&rbuf[..2], b"hi");
    let mut e = [DynEntry::default(); 1];
    read_some(&d.cq, &mut e[..], &sd);
    assert_eq!(e[0].context(), Context(2));
    assert_eq!(fabric::trywait(&[&d.cq, &scq]), Ok(()));
    // A static counter through `dyn CntrOps`.
    let c = sd.cntr(&CntrAttr::DEFAULT).unwrap();
    let c_ops: &dyn CntrOps = &c;
    c_ops.add(3);
    assert_eq!(c.read(), 3);
}

/// The tagged reads of [`CqOps`] on CQs that do not store tagged entries (a dyn CQ of
/// the msg format, a static msg-format CQ): tagged entries holding the format's fields,
/// the others zero, with source addresses and through the blocking form.
#[test]
fn tagged_reads_of_other_formats() {
    let mut rbuf = [0u8; 8];
    let a = node(rdm(), CqFormatKind::Unspec);
    let b = node(rdm(), CqFormatKind::Msg);
    let msg_only = |ctx: usize| CqTaggedEntry {
        op_context: Context(ctx),
        flags: CqFlags::RECV | CqFlags::TAGGED | CqFlags::REMOTE_CQ_DATA,
        len: 8,
        ..CqTaggedEntry::default()
    };
    exchange(&a, &b, &mut rbuf, 10);
    let ops: &dyn CqOps = &b.cq;
    let mut t = [CqTaggedEntry {
        tag: 1,
        ..CqTaggedEntry::default()
    }; 3];
    let mut src = [FiAddr(7); 2];
    let end = Instant::now() + DEADLINE;
    let n = loop {
        match ops.read_tagged(&mut t, Some(&mut src)) {
            Ok(n) => break n,
            Err(Error::Again) => {}
            Err(e) => panic!("read_tagged: {e}"),
        }
        a.domain.progress();
        assert!(Instant::now() < end, "no completion");
    };
    assert_eq!((n, t[0], src[0]), (1, msg_only(10), FiAddr::NOTAVAIL));
    assert_eq!(&rbuf, b"payload!");
    exchange(&a, &b, &mut rbuf, 20);
    a.domain.progress();
    let n = ops.sread_tagged(&mut t, None, 1, Some(DEADLINE)).unwrap();
    assert_eq!((n, t[0]), (1, msg_only(20)));

    // A static CQ of the msg format converts its own entries (its endpoint reports
    // sources: the message came from itself).
    type S = Stack<Loopback, ThreadDomain, Manual, CqMsg>;
    let info = getinfo::<S>(Some(&rdm())).unwrap().remove(0);
    let sd = Fabric::<S>::open(&info).unwrap().domain(&info).unwrap();
    let scq = sd.cq(&CqAttr::DEFAULT).unwrap();
    let sav = sd.av(&AvAttr::DEFAULT).unwrap();
    let sep = sd.endpoint(&info).unwrap();
    sep.bind_cq(&scq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    sep.bind_av(&sav).unwrap();
    sep.enable().unwrap();
    let me = sav.insert(&sep.name()).unwrap();
    // SAFETY: `rbuf` outlives the receive, which completes below.
    unsafe { sep.trecv(&mut rbuf, FiAddr::UNSPEC, 3, 0, Context(30)) }.unwrap();
    sep.tinjectdata(b"12345678", 9, me, 3).unwrap();
    let ops: &dyn CqOps = &scq;
    let n = ops
        .sread_tagged(&mut t, Some(&mut src), 1, Some(DEADLINE))
        .unwrap();
    assert_eq!((n, t[0], src[0]), (1, msg_only(30), me));
    assert_eq!(&rbuf, b"12345678");
    assert_eq!(ops.read_tagged(&mut t, None), Err(Error::Again));
}

/// Shared transmit and receive contexts and a scalable endpoint's contexts, opened
/// through the wrappers' own methods.
#[test]
fn shared_and_scalable_contexts() {
    let mut rbuf = [[0u8; 4]; 2];
    let peer = node(rdm(), CqFormatKind::Unspec);
    let mut info = Two::getinfo_filtered(Some(&rdm()), &ProviderFilter::parse("loopback"))
        .unwrap()
        .remove(0);
    let fabric = Two::fabric(&info).unwrap();
    let d = fabric.domain(&info).unwrap();
    let cq = d.cq(&CqAttr::DEFAULT).unwrap();
    let av = d.av(&AvAttr::DEFAULT).unwrap();
    let stx = d.shared_tx(&info).unwrap();
    let srx = d.shared_rx(&info).unwrap();
    stx.bind_cq(&cq, BindFlags::TRANSMIT).unwrap();
    srx.bind_cq(&cq, BindFlags::RECV).unwrap();
    let ep = stx.endpoint(&info, Some(&srx)).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    let to_peer = av.insert(&peer.ep.name()).unwrap();
    let to_ep = peer.av.insert(&ep.name()).unwrap();
    let [r0, r1] = &mut rbuf;
    // SAFETY: `rbuf` outlives the receives, which complete below.
    unsafe {
        ep.recv(r0, FiAddr::UNSPEC, Context(1)).unwrap();
        peer.ep.recv(r1, FiAddr::UNSPEC, Context(2)).unwrap();
    }
    ep.send(b"stx!", to_peer, Context(3)).unwrap();
    peer.ep.send(b"srx!", to_ep, Context(4)).unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        let mut e = [DynEntry::default(); 2];
        let n = read_some(&cq, &mut e[..], &peer.domain);
        got.extend(e[..n].iter().map(|e| e.context().0));
    }
    got.sort_unstable();
    assert_eq!(got, [1, 3]);
    let mut e = [DynEntry::default(); 2];
    let mut n = 0;
    while n < 2 {
        n += read_some(&peer.cq, &mut e[n..], &d);
    }
    assert_eq!(&rbuf, &[*b"srx!", *b"stx!"]);
    // A shared receive context of another stack is refused.
    let other = node(rdm().threading(ThreadingLevel::Safe), CqFormatKind::Unspec);
    let osrx = other.domain.shared_rx(&info).unwrap();
    assert!(matches!(
        stx.endpoint(&info, Some(&osrx)),
        Err(Error::Domain)
    ));

    // Scalable endpoint: contexts through the wrapper.
    info.ep_attr.tx_ctx_cnt = 2;
    info.ep_attr.rx_ctx_cnt = 2;
    let sep = d.scalable_endpoint(&info).unwrap();
    sep.bind_av(&av).unwrap();
    let (tx1, rx1) = (sep.tx_context(1).unwrap(), sep.rx_context(1).unwrap());
    assert!(sep.tx_context(2).is_err() && sep.rx_context(2).is_err());
    let cq2 = d.cq(&CqAttr::DEFAULT).unwrap();
    tx1.bind_cq(&cq2, BindFlags::TRANSMIT).unwrap();
    rx1.bind_cq(&cq2, BindFlags::RECV).unwrap();
    tx1.enable().unwrap();
    rx1.enable().unwrap();
    sep.enable().unwrap();
    tx1.inject(b"ctx1", to_peer).unwrap();
    let mut buf = [0u8; 4];
    // SAFETY: `buf` outlives the receive, which completes below.
    unsafe { peer.ep.recv(&mut buf, FiAddr::UNSPEC, Context(5)).unwrap() };
    let mut e = [DynEntry::default(); 1];
    read_some(&peer.cq, &mut e[..], &d);
    assert_eq!((e[0].context(), &buf), (Context(5), b"ctx1"));
}

/// Every trait stays object safe (this fails to compile otherwise).
#[test]
fn traits_are_object_safe() {
    let _: Option<&dyn FabricOps> = None;
    let _: Option<&dyn DomainOps> = None;
    let _: Option<&dyn EndpointOps> = None;
    let _: Option<&dyn TxOps> = None;
    let _: Option<&dyn RxOps> = None;
    let _: Option<&dyn ScalableEndpointOps> = None;
    let _: Option<&dyn TxContextOps> = None;
    let _: Option<&dyn RxContextOps> = None;
    let _: Option<&dyn SharedTxOps> = None;
    let _: Option<&dyn SharedRxOps> = None;
    let _: Option<&dyn CqOps> = None;
    let _: Option<&dyn CntrOps> = None;
    let _: Option<&dyn EqOps> = None;
    let _: Option<&dyn AvOps> = None;
    let _: Option<&dyn MrOps> = None;
    let _: Option<&dyn WaitSetOps> = None;
    let _: Option<&dyn PollSetOps> = None;
}
