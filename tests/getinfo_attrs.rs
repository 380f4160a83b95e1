//! What `getinfo` advertises holds (issue 27): for each provider (loopback, shm), every
//! attribute of the infos `getinfo` returns is read and checked against behaviour, at
//! the advertised value where that is a limit (an inject of exactly `inject_size` goes,
//! one byte more is refused; `iov_limit` entries go, one more is refused; ...), and by
//! an interleaving that would break it where it is an ordering (`msg_order`,
//! `comp_order`). Atomics: every (class, op, datatype) the valid queries accept runs,
//! at counts up to the advertised maximum, against a reference computed here; every
//! other one is refused with `FI_EOPNOTSUPP`. On shm the orderings and atomics are
//! checked both against ordinary registrations (the ring path) and against published
//! segments (the initiator's direct path), and several processes update one word
//! through both paths at once.
//!
//! Every test body is generic over the stack and instantiated per provider at the end
//! of the file; cross-process roles re-run this binary (`child_entry`).

mod shm_child;

use std::time::{Duration, Instant};

use fabric::atomic::AtomicClass;
use fabric::attr::{AvKind, ProgressMode, ResourceMgmt, ThreadingLevel};
use fabric::info::{core_candidate, version};
use fabric::limits::MAX_ATOMIC_SIZE;
use fabric::prelude::*;
use fabric::Provider;
use fabric_shm::{MappedSegment, Shm};
use shm_child::{hex, unhex, Ctl, Kid, DEADLINE, ROLE, STACK};

// ---------------------------------------------------------------------------------
// Nodes and waits
// ---------------------------------------------------------------------------------

/// An enabled endpoint with its CQ (transmit and receive), AV, domain and fabric, all
/// from one info.
struct Node<S: Config> {
    ep: Endpoint<S>,
    cq: Cq<S>,
    av: AddressVector<S>,
    domain: Domain<S>,
    info: Info,
    fabric: Fabric<S>,
}

/// A stack whose completions read as tagged entries (what every test here uses).
trait Tagged: Config<Cq: CqFormat<Entry = CqTaggedEntry>> {}
impl<S: Config<Cq: CqFormat<Entry = CqTaggedEntry>>> Tagged for S {}

fn open<S: Tagged>(info: &Info) -> Node<S> {
    let fabric = Fabric::<S>::open(info).expect("fabric");
    let domain = fabric.domain(info).expect("domain");
    let cq = domain.cq(&CqAttr::DEFAULT).expect("cq");
    let av = domain.av(&AvAttr::DEFAULT).expect("av");
    let ep = domain.endpoint(info).expect("endpoint");
    ep.bind_av(&av).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.enable().unwrap();
    Node {
        ep,
        cq,
        av,
        domain,
        info: info.clone(),
        fabric,
    }
}

/// Every connectionless info `getinfo` returns without hints: what an AV addresses.
/// The MSG infos have their own tests (`conformance_cm.rs`).
fn infos<S: Config>() -> Vec<Info> {
    getinfo::<S>(None)
        .expect("getinfo")
        .into_iter()
        .filter(|i| i.ep_attr.ep_type != EpType::Msg)
        .collect()
}

/// The first reliable-datagram info.
fn rdm<S: Config>() -> Info {
    infos::<S>()
        .into_iter()
        .find(|i| i.ep_attr.ep_type == EpType::Rdm)
        .expect("an FI_EP_RDM info")
}

/// Two nodes from `info` (initiator, target) and the target's address at the initiator.
fn pair_of<S: Tagged>(info: &Info) -> (Node<S>, Node<S>, FiAddr) {
    let i = open::<S>(info);
    let t = open::<S>(info);
    let at = i.av.insert(&t.ep.name()).unwrap();
    (i, t, at)
}

fn pair<S: Tagged>() -> (Node<S>, Node<S>, FiAddr) {
    pair_of(&rdm::<S>())
}

/// A completion or an error entry.
type Entry = std::result::Result<CqTaggedEntry, CqErrEntry>;

/// The next completion of `n`, progressing `others` (the peers' domains) meanwhile.
#[track_caller]
fn wait<S: Tagged>(n: &Node<S>, others: &[&Domain<S>]) -> Entry {
    let deadline = Instant::now() + DEADLINE;
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        match n.cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Err(Error::Avail) => return Err(n.cq.read_err().unwrap()),
            Ok(_) | Err(Error::Again) => {}
            Err(err) => panic!("cq read: {err}"),
        }
        for d in others {
            d.progress();
        }
        assert!(Instant::now() < deadline, "no completion in time");
    }
}

/// The next completion, which must be a success with context `ctx`.
#[track_caller]
fn done<S: Tagged>(n: &Node<S>, others: &[&Domain<S>], ctx: usize) -> CqTaggedEntry {
    let e = wait(n, others).unwrap_or_else(|e| panic!("error entry {e:?}, wanted {ctx}"));
    assert_eq!(e.op_context, Context(ctx), "completion order");
    e
}

/// The next `ctxs.len()` completions, all successes, with the contexts `ctxs` in any
/// order (the transmit side does not order completions).
#[track_caller]
fn done_all<S: Tagged>(n: &Node<S>, others: &[&Domain<S>], ctxs: &[usize]) {
    let mut got: Vec<usize> = ctxs
        .iter()
        .map(|_| match wait(n, others) {
            Ok(e) => e.op_context.0,
            Err(e) => panic!("error entry {e:?}, wanted {ctxs:?}"),
        })
        .collect();
    got.sort_unstable();
    let mut want = ctxs.to_vec();
    want.sort_unstable();
    assert_eq!(got, want, "completions");
}

/// No completion now (one read, which progresses `n`'s own domain only).
#[track_caller]
fn quiet<S: Tagged>(n: &Node<S>) {
    let mut e = [CqTaggedEntry::default(); 1];
    match n.cq.read(&mut e) {
        Err(Error::Again) | Ok(0) => {}
        other => panic!("unexpected completion: {other:?}"),
    }
}

/// `n` bytes that differ with `seed`.
fn pattern(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

fn mr_attr(key: u64) -> MrAttr {
    MrAttr {
        access: RW,
        requested_key: key,
        ..MrAttr::DEFAULT
    }
}

/// Target memory as the tests see it: local copies in and out, and how peers name it.
/// Implemented by ordinary registrations and (shm) published segments, so that one
/// test body checks the ring path and the direct path.
trait Mem {
    fn get(&self, off: usize, out: &mut [u8]);
    fn put(&self, off: usize, data: &[u8]);
    fn key(&self) -> u64;
    fn addr(&self, off: usize) -> u64;
    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        self.get(off, &mut b);
        b
    }
}

impl<S: Config> Mem for MemoryRegion<'_, S> {
    fn get(&self, off: usize, out: &mut [u8]) {
        self.read(off, out).unwrap();
    }
    fn put(&self, off: usize, data: &[u8]) {
        self.write(off, data).unwrap();
    }
    fn key(&self) -> u64 {
        MemoryRegion::key(self)
    }
    fn addr(&self, off: usize) -> u64 {
        self.remote_addr() + off as u64
    }
}

// ---------------------------------------------------------------------------------
// The infos themselves
// ---------------------------------------------------------------------------------

/// getinfo reports the provider's identity, the stack's threading, progress and AV
/// type, both endpoint types, and the limits the provider's constants name; what the
/// core cannot do (multicast, collectives, FI_MR_* requirements, mode bits) is not
/// claimed, and asking for it matches nothing.
fn identity<S: Config>() {
    let types: Vec<EpType> = getinfo::<S>(None)
        .unwrap()
        .iter()
        .map(|i| i.ep_attr.ep_type)
        .collect();
    // MSG exactly where the transport has connection management.
    let cm = <<<S::Provider as Provider>::Transport as fabric::Transport>::Cm as fabric::provider::ConnectionManager<_>>::ENABLED;
    if cm {
        assert_eq!(types, [EpType::Rdm, EpType::Dgram, EpType::Msg]);
    } else {
        assert_eq!(types, [EpType::Rdm, EpType::Dgram]);
    }
    let all = getinfo::<S>(None).unwrap();
    for i in &all {
        let f = &i.fabric_attr;
        assert_eq!(f.prov_name, S::Provider::NAME);
        assert_eq!(f.prov_version, S::Provider::VERSION);
        assert_eq!(f.api_version, version(1, 17));
        let d = &i.domain_attr;
        assert_eq!(d.threading, <S::Threading as Threading>::LEVEL);
        assert_eq!(d.data_progress, <S::Progress as Progress>::MODE);
        assert_eq!(d.control_progress, <S::Progress as Progress>::MODE);
        assert_eq!(d.av_type, <S::Av as fabric::AvType>::KIND);
        assert_eq!(d.resource_mgmt, ResourceMgmt::Enabled);
        assert_eq!(d.mr_mode, MrMode::empty());
        assert_eq!(i.mode, Mode::empty());
        assert_eq!(i.tx_attr.inject_size, S::Provider::INJECT_SIZE);
        assert_eq!(i.ep_attr.max_msg_size, S::Provider::MAX_MSG_SIZE);
        assert!(!i.caps.intersects(Caps::MULTICAST | Caps::COLLECTIVE));
        // The tx/rx caps are the info's caps that apply to each side.
        assert_eq!(i.tx_attr.caps, i.caps & fabric::info::TX_CAPS);
        assert_eq!(i.rx_attr.caps, i.caps & fabric::info::RX_CAPS);
    }
    for (caps, what) in [(Caps::MULTICAST, "multicast"), (Caps::COLLECTIVE, "coll")] {
        let h = Hints::new().caps(caps);
        assert_eq!(getinfo::<S>(Some(&h)), Err(Error::NoData), "{what}");
    }
    // An application that supports no mode bit and no mr_mode bit gets every info.
    let h = Hints::new().mode(Mode::empty()).mr_mode(MrMode::empty());
    assert_eq!(getinfo::<S>(Some(&h)).unwrap().len(), all.len());
    // Each advertised capability alone is granted.
    for i in &all {
        for cap in i.caps.iter() {
            let h = Hints::new().caps(cap).ep_type(i.ep_attr.ep_type);
            let g = getinfo::<S>(Some(&h)).unwrap_or_else(|e| panic!("{cap:?}: {e}"));
            assert!(g[0].caps.contains(cap), "{cap:?}");
        }
    }
}

// ---------------------------------------------------------------------------------
// caps: each one advertised is usable, on each endpoint type
// ---------------------------------------------------------------------------------

/// Every capability bit of every info is exercised on endpoints opened from that info.
fn caps_usable<S: Tagged>() {
    for info in infos::<S>() {
        let ty = info.ep_attr.ep_type;
        let (i, t, at) = pair_of::<S>(&info);
        let both = [&i.domain, &t.domain];
        let mut mem = vec![0u8; 256];
        let mr = t.domain.mr_reg(&mut mem, &mr_attr(0x100)).unwrap();
        let mut checked = Caps::empty();
        let caps = info.caps;

        if caps.contains(Caps::MSG | Caps::SEND | Caps::RECV) {
            let mut buf = [0u8; 5];
            // SAFETY: `buf` outlives the receive, read after its completion.
            unsafe { t.ep.recv(&mut buf, FiAddr::UNSPEC, Context(1)) }.unwrap();
            i.ep.send(b"hello", at, Context(2)).unwrap();
            done(&t, &both, 1);
            done(&i, &both, 2);
            assert_eq!(&buf, b"hello", "{ty:?}");
            checked |= Caps::MSG | Caps::SEND | Caps::RECV;
        }
        if caps.contains(Caps::TAGGED) {
            let mut buf = [0u8; 3];
            // SAFETY: as above.
            unsafe { t.ep.trecv(&mut buf, FiAddr::UNSPEC, 9, 0, Context(1)) }.unwrap();
            i.ep.tinject(b"tag", at, 9).unwrap();
            assert_eq!(done(&t, &both, 1).tag, 9);
            assert_eq!(&buf, b"tag");
            checked |= Caps::TAGGED;
        }
        if caps.contains(Caps::RMA | Caps::WRITE | Caps::REMOTE_WRITE) {
            i.ep.write(b"rma!", at, mr.addr(8), 0x100, Context(3))
                .unwrap();
            done(&i, &both, 3);
            assert_eq!(mr.bytes(8, 4), b"rma!");
            checked |= Caps::RMA | Caps::WRITE | Caps::REMOTE_WRITE;
        }
        if caps.contains(Caps::RMA | Caps::READ | Caps::REMOTE_READ) {
            let mut back = [0u8; 4];
            // SAFETY: `back` outlives the read, read after its completion.
            unsafe { i.ep.read(&mut back, at, mr.addr(8), 0x100, Context(4)) }.unwrap();
            done(&i, &both, 4);
            assert_eq!(&back, b"rma!");
            checked |= Caps::READ | Caps::REMOTE_READ;
        }
        if caps.contains(Caps::ATOMIC) {
            let mut old = [0u8; 8];
            for want in [0u64, 5] {
                // SAFETY: `old` outlives the atomic, read after its completion.
                unsafe {
                    i.ep.fetch_atomic(
                        &5u64.to_ne_bytes(),
                        &mut old,
                        Datatype::Uint64,
                        AtomicOp::Sum,
                        at,
                        mr.addr(64),
                        0x100,
                        Context(5),
                    )
                }
                .unwrap();
                done(&i, &both, 5);
                assert_eq!(u64::from_ne_bytes(old), want);
            }
            checked |= Caps::ATOMIC;
        }
        if caps.contains(Caps::MULTI_RECV) {
            let mut big = [0u8; 64];
            {
                let mut iov: [&mut [u8]; 1] = [&mut big];
                let mut m = MsgMut {
                    iov: &mut iov,
                    addr: FiAddr::UNSPEC,
                    context: Context(6),
                };
                t.ep.setopt(EpOpt::MinMultiRecv(17)).unwrap();
                // SAFETY: `big` outlives the multi-receive, released below.
                unsafe { t.ep.recvmsg(&mut m, OpFlags::MULTI_RECV) }.unwrap();
            }
            i.ep.inject(&[1; 24], at).unwrap();
            i.ep.inject(&[2; 24], at).unwrap();
            let a = done(&t, &both, 6);
            let b = done(&t, &both, 6);
            assert!(!a.flags.contains(CqFlags::MULTI_RECV));
            assert!(
                b.flags.contains(CqFlags::MULTI_RECV),
                "released with 16 < 17 bytes left"
            );
            assert_eq!(b.buf - a.buf, 24);
            assert_eq!((&big[..24], &big[24..48]), (&[1u8; 24][..], &[2u8; 24][..]));
            checked |= Caps::MULTI_RECV;
        }
        if caps.contains(Caps::TRIGGER) {
            let c = i.domain.cntr(&CntrAttr::DEFAULT).unwrap();
            let mut buf = [0u8; 4];
            // SAFETY: as above.
            unsafe { t.ep.recv(&mut buf, FiAddr::UNSPEC, Context(7)) }.unwrap();
            let iov: [&[u8]; 1] = [b"trig"];
            let m = Msg {
                iov: &iov,
                addr: at,
                context: Context(8),
                data: 0,
            };
            i.ep.sendmsg_triggered(&m, OpFlags::empty(), &c, 2).unwrap();
            c.add(1);
            i.domain.progress();
            t.domain.progress();
            quiet(&t);
            c.add(1);
            done(&t, &both, 7);
            done(&i, &both, 8);
            assert_eq!(&buf, b"trig");
            checked |= Caps::TRIGGER;
        }
        if caps.contains(Caps::FENCE) {
            // A fenced read after a write returns the write's data: the read waits for
            // the write's acknowledgement.
            i.ep.write(b"fenc", at, mr.addr(100), 0x100, Context(9))
                .unwrap();
            let mut back = [0u8; 4];
            {
                let mut iov: [&mut [u8]; 1] = [&mut back];
                let mut m = RmaMsgMut {
                    iov: &mut iov,
                    addr: at,
                    rma_iov: RmaIov {
                        addr: mr.addr(100),
                        len: 4,
                        key: 0x100,
                    },
                    context: Context(10),
                };
                // SAFETY: `back` outlives the read, read after its completion.
                unsafe { i.ep.readmsg(&mut m, OpFlags::FENCE) }.unwrap();
            }
            done_all(&i, &both, &[9, 10]);
            assert_eq!(&back, b"fenc");
            checked |= Caps::FENCE;
        }
        if caps.contains(Caps::RMA_EVENT) {
            let mut m2 = [0u8; 16];
            let mr2 = t.domain.mr_reg(&mut m2, &mr_attr(0x101)).unwrap();
            let c = t.domain.cntr(&CntrAttr::DEFAULT).unwrap();
            mr2.bind_cntr(&c, BindFlags::REMOTE_WRITE).unwrap();
            mr2.enable().unwrap();
            i.ep.write(b"ev", at, mr2.addr(0), 0x101, Context(11))
                .unwrap();
            done(&i, &both, 11);
            t.domain.progress();
            assert_eq!(c.read(), 1, "{ty:?}: a remote write counted on the MR");
            checked |= Caps::RMA_EVENT;
        }
        if caps.contains(Caps::SOURCE) {
            let mut buf = [0u8; 3];
            let i_at_t = t.av.insert(&i.ep.name()).unwrap();
            // SAFETY: as above.
            unsafe { t.ep.recv(&mut buf, FiAddr::UNSPEC, Context(12)) }.unwrap();
            i.ep.inject(b"src", at).unwrap();
            let deadline = Instant::now() + DEADLINE;
            let mut e = [CqTaggedEntry::default(); 1];
            let mut src = [FiAddr::NOTAVAIL; 1];
            while t.cq.read_from(&mut e, &mut src) != Ok(1) {
                i.domain.progress();
                assert!(Instant::now() < deadline);
            }
            assert_eq!((e[0].op_context, src[0]), (Context(12), i_at_t));
            checked |= Caps::SOURCE;
        }
        if caps.contains(Caps::DIRECTED_RECV) {
            // A receive from one source ignores another's message.
            let other = open::<S>(&info);
            let o_at = other.av.insert(&t.ep.name()).unwrap();
            let i_at_t = t.av.insert(&i.ep.name()).unwrap();
            t.av.insert(&other.ep.name()).unwrap();
            let mut buf = [0u8; 4];
            // SAFETY: as above.
            unsafe { t.ep.recv(&mut buf, i_at_t, Context(13)) }.unwrap();
            other.ep.inject(b"othr", o_at).unwrap();
            other.domain.progress();
            t.domain.progress();
            quiet(&t);
            i.ep.inject(b"mine", at).unwrap();
            done(&t, &both, 13);
            assert_eq!(&buf, b"mine");
            checked |= Caps::DIRECTED_RECV;
        }
        if caps.contains(Caps::NAMED_RX_CTX) {
            named_rx_ctx(&i, &info);
            checked |= Caps::NAMED_RX_CTX;
        }
        if caps.contains(Caps::SHARED_AV) {
            let name = if S::Provider::NAME == "shm" {
                "getinfo-attrs-shm"
            } else {
                "getinfo-attrs-loopback"
            };
            let attr = AvAttr {
                name: Some(name),
                ..AvAttr::DEFAULT
            };
            let d2 = i.fabric.domain(&info).unwrap();
            let av1 = i.domain.av(&attr).unwrap();
            let x = av1.insert(&t.ep.name()).unwrap();
            let av2 = d2.av(&attr).unwrap();
            assert_eq!(av2.lookup(x).unwrap(), t.ep.name(), "{ty:?}");
            checked |= Caps::SHARED_AV;
        }
        if caps.contains(Caps::LOCAL_COMM) {
            // Everything above ran between endpoints of one host.
            checked |= Caps::LOCAL_COMM;
        }
        assert_eq!(checked, caps, "{ty:?}: capabilities left unchecked");
        // A capability not granted to an endpoint is refused by it.
        let mut narrow = info.clone();
        narrow.caps = Caps::MSG | Caps::SEND | Caps::RECV;
        let n = open::<S>(&narrow);
        let nat = n.av.insert(&t.ep.name()).unwrap();
        assert_eq!(
            n.ep.write(b"x", nat, mr.addr(0), 0x100, Context(1)),
            Err(Error::OpNotSupp)
        );
        assert_eq!(n.ep.tinject(b"x", nat, 1), Err(Error::OpNotSupp));
    }
}

/// FI_NAMED_RX_CTX: a scalable endpoint's receive contexts are addressed by index.
fn named_rx_ctx<S: Tagged>(s: &Node<S>, info: &Info) {
    let mut info = info.clone();
    info.ep_attr.tx_ctx_cnt = 1;
    info.ep_attr.rx_ctx_cnt = 2;
    let d = s.fabric.domain(&info).unwrap();
    let sep = d.scalable_endpoint(&info).unwrap();
    let sav = d.av(&AvAttr::DEFAULT).unwrap();
    sep.bind_av(&sav).unwrap();
    let cq = d.cq(&CqAttr::DEFAULT).unwrap();
    let rx1 = sep.rx_context(1).unwrap();
    let rx0 = sep.rx_context(0).unwrap();
    rx0.bind_cq(&cq, BindFlags::RECV).unwrap();
    rx1.bind_cq(&cq, BindFlags::RECV).unwrap();
    rx0.enable().unwrap();
    rx1.enable().unwrap();
    sep.enable().unwrap();
    let av = s
        .domain
        .av(&AvAttr {
            rx_ctx_bits: 1,
            ..AvAttr::DEFAULT
        })
        .unwrap();
    let ep = s.domain.endpoint(&s.info).unwrap();
    ep.bind_av(&av).unwrap();
    ep.bind_cq(&s.cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.enable().unwrap();
    let base = av.insert(&sep.name()).unwrap();
    let mut buf = [0u8; 3];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { rx1.recv(&mut buf, FiAddr::UNSPEC, Context(21)) }.unwrap();
    ep.inject(b"rx1", av.rx_addr(base, 1)).unwrap();
    let deadline = Instant::now() + DEADLINE;
    let mut e = [CqTaggedEntry::default(); 1];
    while cq.read(&mut e) != Ok(1) {
        s.domain.progress();
        assert!(Instant::now() < deadline);
    }
    assert_eq!((e[0].op_context, &buf), (Context(21), b"rx1"));
}

// ---------------------------------------------------------------------------------
// tx_attr, rx_attr, ep_attr: limits at their advertised values
// ---------------------------------------------------------------------------------

/// `inject_size`: every inject form takes exactly that many bytes, delivered whole,
/// and refuses one byte more with `FI_EMSGSIZE`.
fn inject_size<S: Tagged>() {
    let (i, t, at) = pair::<S>();
    let both = [&i.domain, &t.domain];
    let n = i.info.tx_attr.inject_size;
    let edge = pattern(n, 1);
    let over = vec![0u8; n + 1];
    let mut buf = vec![0u8; n + 1];
    let mut mem = vec![0u8; n + 1];
    let mr = t.domain.mr_reg(&mut mem, &mr_attr(0x200)).unwrap();
    type Inject<'a, S> = (&'static str, &'a dyn Fn(&Endpoint<S>, &[u8]) -> Result<()>);
    let forms: [Inject<'_, S>; 4] = [
        ("inject", &|ep, b| ep.inject(b, at)),
        ("tinject", &|ep, b| ep.tinject(b, at, 3)),
        ("injectdata", &|ep, b| ep.injectdata(b, 7, at)),
        ("tinjectdata", &|ep, b| ep.tinjectdata(b, 7, at, 3)),
    ];
    for (k, (what, f)) in forms.iter().enumerate() {
        buf.fill(0);
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe { t.ep.trecv(&mut buf, FiAddr::UNSPEC, 3, 0, Context(k)) }.unwrap();
        // SAFETY: as above; a tagged receive does not match untagged messages.
        unsafe { t.ep.recv(&mut buf, FiAddr::UNSPEC, Context(k)) }.unwrap();
        f(&i.ep, &edge).unwrap_or_else(|e| panic!("{what} of inject_size: {e}"));
        assert_eq!(done(&t, &both, k).len, n, "{what}");
        assert!(buf[..n] == edge[..], "{what}: payload");
        // The other receive is still posted: cancel it.
        t.ep.cancel(Context(k)).unwrap();
        assert_eq!(wait(&t, &both).unwrap_err().err, Error::Canceled);
        assert_eq!(
            f(&i.ep, &over),
            Err(Error::MsgSize),
            "{what} of inject_size + 1"
        );
    }
    i.ep.inject_write(&edge, at, mr.addr(0), 0x200).unwrap();
    i.ep.inject_writedata(&edge, 5, at, mr.addr(1), 0x200)
        .unwrap();
    assert_eq!(done(&t, &both, 0).data, 5);
    assert!(mr.bytes(1, n) == edge);
    assert_eq!(
        i.ep.inject_write(&over, at, mr.addr(0), 0x200),
        Err(Error::MsgSize)
    );
    assert_eq!(
        i.ep.inject_writedata(&over, 5, at, mr.addr(0), 0x200),
        Err(Error::MsgSize)
    );
    // FI_INJECT on a send: the same limit.
    let iov: [&[u8]; 1] = [&over];
    let m = Msg {
        iov: &iov,
        addr: at,
        context: Context(1),
        data: 0,
    };
    assert_eq!(i.ep.sendmsg(&m, OpFlags::INJECT), Err(Error::MsgSize));
}

/// `tx_attr.iov_limit` and `rx_attr.iov_limit`: that many entries gather and scatter
/// in order; one more is `FI_EINVAL`. `rma_iov_limit` is 1, which the message types
/// (one `RmaIov`) cannot exceed.
fn iov_limits<S: Tagged>() {
    let (i, t, at) = pair::<S>();
    let both = [&i.domain, &t.domain];
    let (tx, rx) = (i.info.tx_attr.iov_limit, i.info.rx_attr.iov_limit);
    assert!(tx >= 1 && rx >= 1);
    assert_eq!(i.info.tx_attr.rma_iov_limit, 1);
    let parts: Vec<Vec<u8>> = (0..=tx).map(|k| pattern(3 + k, k as u64)).collect();
    let iov: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    let whole: Vec<u8> = parts[..tx].concat();
    let mut recvd = vec![0u8; whole.len()];
    let mut mem = vec![0u8; 256];
    let mr = t.domain.mr_reg(&mut mem, &mr_attr(0x300)).unwrap();
    // SAFETY: `recvd` outlives the receive, read after its completion.
    unsafe { t.ep.recv(&mut recvd, FiAddr::UNSPEC, Context(1)) }.unwrap();
    i.ep.sendv(&iov[..tx], at, Context(2)).unwrap();
    done(&t, &both, 1);
    done(&i, &both, 2);
    assert_eq!(recvd, whole, "sendv of iov_limit entries");
    assert_eq!(i.ep.sendv(&iov, at, Context(3)), Err(Error::Inval));
    assert_eq!(i.ep.tsendv(&iov, at, 1, Context(3)), Err(Error::Inval));
    i.ep.writev(&iov[..tx], at, mr.addr(0), 0x300, Context(4))
        .unwrap();
    done(&i, &both, 4);
    assert_eq!(
        mr.bytes(0, whole.len()),
        whole,
        "writev of iov_limit entries"
    );
    assert_eq!(
        i.ep.writev(&iov, at, mr.addr(0), 0x300, Context(5)),
        Err(Error::Inval)
    );
    // Scatter: rx_attr.iov_limit pieces on receive, tx one on read.
    let sizes: Vec<usize> = (0..=rx.max(tx)).map(|k| 2 + k).collect();
    let mut store: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    let total: usize = sizes[..rx].iter().sum();
    let msg = pattern(total, 9);
    {
        let mut pieces: Vec<&mut [u8]> = store.iter_mut().map(|v| &mut v[..]).collect();
        // SAFETY: refused, nothing posted.
        let r = unsafe {
            t.ep.recvv(&mut pieces[..rx + 1], FiAddr::UNSPEC, Context(6))
        };
        assert_eq!(r, Err(Error::Inval));
        // SAFETY: `store` outlives the receive, read after its completion.
        unsafe { t.ep.recvv(&mut pieces[..rx], FiAddr::UNSPEC, Context(6)) }.unwrap();
    }
    i.ep.send(&msg, at, Context(7)).unwrap();
    done(&t, &both, 6);
    done(&i, &both, 7);
    assert_eq!(store[..rx].concat(), msg, "recvv of iov_limit entries");
    mr.put(0, &msg);
    let rtotal: usize = sizes[..tx].iter().sum();
    {
        let mut pieces: Vec<&mut [u8]> = store.iter_mut().map(|v| &mut v[..]).collect();
        // SAFETY: refused, nothing posted.
        let r = unsafe {
            i.ep.readv(&mut pieces[..tx + 1], at, mr.addr(0), 0x300, Context(8))
        };
        assert_eq!(r, Err(Error::Inval));
        // SAFETY: `store` outlives the read, read after its completion.
        unsafe {
            i.ep.readv(&mut pieces[..tx], at, mr.addr(0), 0x300, Context(8))
        }
        .unwrap();
    }
    done(&i, &both, 8);
    assert_eq!(
        store[..tx].concat(),
        msg[..rtotal],
        "readv of iov_limit entries"
    );
}

/// `tx_attr.size` operations may be outstanding (delivery-complete sends the target
/// took but whose acknowledgements the initiator has not processed), the next one is
/// `FI_EAGAIN`; `rx_attr.size` receives may be posted, the next one is `FI_EAGAIN`.
fn queue_sizes<S: Tagged>() {
    let (i, t, at) = pair::<S>();
    let both = [&i.domain, &t.domain];
    let (txn, rxn) = (i.info.tx_attr.size, i.info.rx_attr.size);
    assert_eq!(i.ep.tx_size_left(), txn);
    assert_eq!(t.ep.rx_size_left(), rxn);
    let iov: [&[u8]; 1] = [b"d"];
    let m = |k: usize| Msg {
        iov: &iov,
        addr: at,
        context: Context(k),
        data: 0,
    };
    for k in 0..txn {
        // The target drains its rings while the initiator never progresses, so only
        // the initiator's transmit queue fills.
        let deadline = Instant::now() + DEADLINE;
        loop {
            match i.ep.sendmsg(&m(k), OpFlags::DELIVERY_COMPLETE) {
                Ok(()) => break,
                Err(Error::Again) => {
                    t.domain.progress();
                    assert!(Instant::now() < deadline, "send {k} of {txn} refused");
                }
                Err(e) => panic!("send {k}: {e}"),
            }
        }
    }
    for _ in 0..4 {
        t.domain.progress();
    }
    assert_eq!(i.ep.tx_size_left(), 0);
    assert_eq!(
        i.ep.sendmsg(&m(txn), OpFlags::DELIVERY_COMPLETE),
        Err(Error::Again),
        "tx_attr.size + 1 outstanding"
    );
    done_all(&i, &both, &(0..txn).collect::<Vec<_>>());
    assert_eq!(i.ep.tx_size_left(), txn);
    // Receives: the target took the messages as unexpected ones; post rx size more.
    let mut bufs = vec![[0u8; 1]; rxn + 1];
    let (posted, extra) = bufs.split_at_mut(rxn);
    let mut discard = [0u8; 1];
    for _ in 0..txn {
        // SAFETY: `discard` outlives the receive, which completes at once.
        unsafe { t.ep.recv(&mut discard, FiAddr::UNSPEC, Context(0)) }.unwrap();
        done(&t, &both, 0);
    }
    for (k, b) in posted.iter_mut().enumerate() {
        // SAFETY: `bufs` outlives the receives, canceled below.
        unsafe { t.ep.recv(b, FiAddr::UNSPEC, Context(k)) }.unwrap();
    }
    assert_eq!(t.ep.rx_size_left(), 0);
    // SAFETY: refused, nothing posted.
    let r = unsafe { t.ep.recv(&mut extra[0], FiAddr::UNSPEC, Context(rxn)) };
    assert_eq!(r, Err(Error::Again), "rx_attr.size + 1 posted");
    for k in 0..rxn {
        t.ep.cancel(Context(k)).unwrap();
        assert_eq!(wait(&t, &both).unwrap_err().err, Error::Canceled);
    }
}

/// `max_msg_size` (and the `max_order_*_size` limits, the same value): a send, a write
/// and a read of exactly that many bytes arrive whole, with read-after-write and
/// write-after-write order kept at that size; one byte more is `FI_EMSGSIZE`.
fn max_msg_size<S: Tagged>() {
    let (i, t, at) = pair::<S>();
    let both = [&i.domain, &t.domain];
    let ep = &i.info.ep_attr;
    let n = ep.max_msg_size;
    assert_eq!(
        (
            ep.max_order_raw_size,
            ep.max_order_war_size,
            ep.max_order_waw_size
        ),
        (n, n, n)
    );
    let a = pattern(n + 1, 1);
    let b = pattern(n, 2);
    let mut got = vec![0u8; n + 1];
    // SAFETY: `got` outlives the receive, read after its completion.
    unsafe { t.ep.recv(&mut got, FiAddr::UNSPEC, Context(1)) }.unwrap();
    i.ep.send(&a[..n], at, Context(2)).unwrap();
    assert_eq!(done(&t, &both, 1).len, n);
    done(&i, &both, 2);
    assert!(got[..n] == a[..n], "a send of max_msg_size");
    assert_eq!(i.ep.send(&a, at, Context(3)), Err(Error::MsgSize));
    assert_eq!(i.ep.tsend(&a, at, 1, Context(3)), Err(Error::MsgSize));
    let mut mem = vec![0u8; n + 1];
    let mr = t.domain.mr_reg(&mut mem, &mr_attr(0x400)).unwrap();
    assert_eq!(
        i.ep.write(&a, at, mr.addr(0), 0x400, Context(3)),
        Err(Error::MsgSize)
    );
    // SAFETY: refused, nothing posted.
    let r = unsafe { i.ep.read(&mut got, at, mr.addr(0), 0x400, Context(3)) };
    assert_eq!(r, Err(Error::MsgSize));
    // RAW, WAW and WAR at max_order_*_size, posted back to back.
    i.ep.write(&a[..n], at, mr.addr(0), 0x400, Context(4))
        .unwrap();
    // SAFETY: `got` outlives the read, read after its completion.
    unsafe { i.ep.read(&mut got[..n], at, mr.addr(0), 0x400, Context(5)) }.unwrap();
    i.ep.write(&b, at, mr.addr(0), 0x400, Context(6)).unwrap();
    done_all(&i, &both, &[4, 5, 6]);
    assert!(
        got[..n] == a[..n],
        "read after write (or before the next write)"
    );
    assert!(mr.bytes(0, n) == b, "write after write");
}

/// `cq_data_size` bytes of remote CQ data arrive whole, on messages and writes;
/// `mem_tag_format` bits all take part in matching; keys of `mr_key_size` bytes work.
fn data_tag_key_sizes<S: Tagged>() {
    let (i, t, at) = pair::<S>();
    let both = [&i.domain, &t.domain];
    assert_eq!(i.info.domain_attr.cq_data_size, 8);
    assert_eq!(i.info.domain_attr.mr_key_size, 8);
    assert_eq!(i.info.ep_attr.mem_tag_format, u64::MAX);
    let data = 0xfedc_ba98_7654_3210u64;
    let mut buf = [0u8; 4];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { t.ep.recv(&mut buf, FiAddr::UNSPEC, Context(1)) }.unwrap();
    i.ep.senddata(b"data", data, at, Context(2)).unwrap();
    assert_eq!(done(&t, &both, 1).data, data);
    done(&i, &both, 2);
    let key = 0xf00d_0000_0000_0001u64;
    let mut mem = [0u8; 16];
    let mr = t.domain.mr_reg(&mut mem, &mr_attr(key)).unwrap();
    assert_eq!(Mem::key(&mr), key);
    i.ep.writedata(b"wd", !data, at, mr.addr(2), key, Context(3))
        .unwrap();
    assert_eq!(done(&t, &both, 0).data, !data);
    done(&i, &both, 3);
    assert_eq!(mr.bytes(2, 2), b"wd");
    // Every tag bit matches: tags differing in the top or the bottom bit only.
    let tag = 0x8000_0000_0000_0001u64;
    let mut x = [0u8; 1];
    // SAFETY: as above.
    unsafe { t.ep.trecv(&mut x, FiAddr::UNSPEC, tag, 0, Context(4)) }.unwrap();
    i.ep.tinject(b"a", at, tag ^ (1 << 63)).unwrap();
    i.ep.tinject(b"b", at, tag ^ 1).unwrap();
    i.ep.tinject(b"c", at, tag).unwrap();
    assert_eq!(done(&t, &both, 4).tag, tag);
    assert_eq!(&x, b"c");
    // The ignore mask covers every bit too.
    // SAFETY: as above.
    unsafe { t.ep.trecv(&mut x, FiAddr::UNSPEC, 0, u64::MAX, Context(5)) }.unwrap();
    assert_eq!(done(&t, &both, 5).tag, tag ^ (1 << 63));
}

/// `mr_mode` is empty: local buffers need no registration or descriptor (no
/// `FI_MR_LOCAL`), the requested key is the key (no `FI_MR_PROV_KEY`), remote
/// addresses are offsets into the region (no `FI_MR_VIRT_ADDR`), a region needs
/// neither `fi_mr_enable` nor an endpoint binding (`FI_MR_ENDPOINT`), any memory may
/// be registered (`FI_MR_ALLOCATED`). `mr_iov_limit` buffers register as one region;
/// one more is `FI_EINVAL`.
fn mr_attrs<S: Tagged>() {
    let (i, t, at) = pair::<S>();
    let both = [&i.domain, &t.domain];
    let d = &t.info.domain_attr;
    assert_eq!(d.mr_mode, MrMode::empty());
    let mut on_stack = [0u8; 32];
    let mr = t
        .domain
        .mr_reg(
            &mut on_stack,
            &MrAttr {
                offset: 1000,
                ..mr_attr(0x501)
            },
        )
        .unwrap();
    assert_eq!((Mem::key(&mr), mr.remote_addr()), (0x501, 1000));
    // An unregistered, stack-allocated source buffer, no descriptor.
    let src = *b"offset";
    i.ep.write(&src, at, 1004, 0x501, Context(1)).unwrap();
    done(&i, &both, 1);
    assert_eq!(mr.bytes(4, 6), b"offset");
    let n = d.mr_iov_limit;
    assert!(n >= 1);
    let mut bufs: Vec<Vec<u8>> = (0..=n).map(|k| vec![0u8; 4 + k]).collect();
    let total: usize = bufs[..n].iter().map(Vec::len).sum();
    {
        let all: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        assert_eq!(
            t.domain.mr_regv(all, &mr_attr(0x502)).err(),
            Some(Error::Inval),
            "mr_iov_limit + 1 buffers"
        );
    }
    let data = pattern(total, 5);
    {
        let some: Vec<&mut [u8]> = bufs[..n].iter_mut().map(|b| &mut b[..]).collect();
        let mr = t.domain.mr_regv(some, &mr_attr(0x502)).unwrap();
        i.ep.write(&data, at, mr.addr(0), 0x502, Context(2))
            .unwrap();
        done(&i, &both, 2);
    }
    assert_eq!(
        bufs[..n].concat(),
        data,
        "a write across mr_iov_limit buffers"
    );
}

/// The domain's counts: `cq_cnt` CQs and `cntr_cnt` counters open at once in one
/// domain; scalable endpoints with `max_ep_tx_ctx`/`max_ep_rx_ctx` contexts (one more
/// is `FI_EINVAL`); shared contexts (`max_ep_stx_ctx`/`max_ep_srx_ctx`). `ep_cnt` and
/// `mr_cnt` are [`domain_capacity`]'s.
fn domain_counts<S: Tagged>() {
    let info = rdm::<S>();
    let d = &info.domain_attr;
    let fabric = Fabric::<S>::open(&info).unwrap();
    let dom = fabric.domain(&info).unwrap();
    let small = CqAttr {
        size: 1,
        ..CqAttr::DEFAULT
    };
    let cqs: Vec<Cq<S>> = (0..d.cq_cnt)
        .map(|k| dom.cq(&small).unwrap_or_else(|e| panic!("cq {k}: {e}")))
        .collect();
    drop(cqs);
    let cntrs: Vec<Counter<S>> = (0..d.cntr_cnt)
        .map(|k| {
            dom.cntr(&CntrAttr::DEFAULT)
                .unwrap_or_else(|e| panic!("cntr {k}: {e}"))
        })
        .collect();
    drop(cntrs);
    let mut sinfo = info.clone();
    sinfo.ep_attr.tx_ctx_cnt = d.max_ep_tx_ctx;
    sinfo.ep_attr.rx_ctx_cnt = d.max_ep_rx_ctx;
    let sep = dom.scalable_endpoint(&sinfo).unwrap();
    assert!(sep.tx_context(d.max_ep_tx_ctx - 1).is_ok());
    assert!(sep.rx_context(d.max_ep_rx_ctx - 1).is_ok());
    assert!(sep.tx_context(d.max_ep_tx_ctx).is_err());
    for (tx, rx) in [(d.max_ep_tx_ctx + 1, 1), (1, d.max_ep_rx_ctx + 1)] {
        let mut over = info.clone();
        over.ep_attr.tx_ctx_cnt = tx;
        over.ep_attr.rx_ctx_cnt = rx;
        assert_eq!(dom.scalable_endpoint(&over).err(), Some(Error::Inval));
    }
    assert_eq!((d.max_ep_stx_ctx, d.max_ep_srx_ctx), (1, 1));
    dom.shared_tx(&info).unwrap();
    dom.shared_rx(&info).unwrap();
}

/// `ep_cnt` endpoints and `mr_cnt` regions (of one byte each) open at once in one
/// domain. Opening that many takes long in debug builds: run with `--ignored`.
fn domain_capacity<S: Tagged>() {
    let info = rdm::<S>();
    let d = &info.domain_attr;
    let fabric = Fabric::<S>::open(&info).unwrap();
    let dom = fabric.domain(&info).unwrap();
    let eps: Vec<Endpoint<S>> = (0..d.ep_cnt)
        .map(|k| {
            dom.endpoint(&info)
                .unwrap_or_else(|e| panic!("endpoint {k} of ep_cnt {}: {e}", d.ep_cnt))
        })
        .collect();
    assert_eq!(eps.len(), d.ep_cnt);
    drop(eps);
    let mut mem = vec![0u8; d.mr_cnt];
    let mrs: Vec<MemoryRegion<'_, S>> = mem
        .chunks_mut(1)
        .enumerate()
        .map(|(k, b)| {
            dom.mr_reg(b, &mr_attr(k as u64))
                .unwrap_or_else(|e| panic!("mr {k}: {e}"))
        })
        .collect();
    assert_eq!(mrs.len(), d.mr_cnt);
}

// ---------------------------------------------------------------------------------
// msg_order and comp_order
// ---------------------------------------------------------------------------------

/// Payload sizes that take every path of the providers: one cell, a packet of many
/// cells, a staged payload, a rendezvous (shm's `INLINE_MAX` and `RNDV_MIN`).
const SIZES: [usize; 4] = [8, 4000, 20_000, 300_000];

/// Every `msg_order` bit advertised, each checked by the interleaving that would break
/// it, the second operation posted right behind the first, for every pair of sizes of
/// [`SIZES`].
/// `mem` is `t`'s memory of at least `2 * 300_000` bytes.
fn orders<S: Tagged>(i: &Node<S>, t: &Node<S>, at: FiAddr, mem: &dyn Mem) {
    let both = [&i.domain, &t.domain];
    assert_eq!(i.info.tx_attr.msg_order, Order::STRICT);
    assert_eq!(i.info.rx_attr.msg_order, Order::STRICT);
    // Transmit completions are not ordered (a send completes before an earlier
    // write's acknowledgement comes); receive completions are, which [`sas`] checks.
    assert_eq!(i.info.tx_attr.comp_order, Order::empty());
    assert_eq!(i.info.rx_attr.comp_order, Order::STRICT);
    let key = mem.key();
    let mut ctx = 100;
    let mut next = || {
        ctx += 1;
        ctx
    };
    for (k, &n1) in SIZES.iter().enumerate() {
        for (j, &n2) in SIZES.iter().enumerate() {
            let seed = (k * 10 + j) as u64;
            let (a, b) = (pattern(n1, seed), pattern(n2, seed + 100));
            let m = n1.min(n2);
            let what = format!("{n1} then {n2} bytes");

            // WAW: the second write wins where they overlap.
            let (c1, c2) = (next(), next());
            i.ep.write(&a, at, mem.addr(0), key, Context(c1)).unwrap();
            i.ep.write(&b, at, mem.addr(0), key, Context(c2)).unwrap();
            done_all(i, &both, &[c1, c2]);
            let got = mem.bytes(0, n1.max(n2));
            assert!(got[..n2] == b[..], "WAW, {what}");
            assert!(
                got[n2..] == a[n2.min(n1)..],
                "WAW, {what}: the first write's tail"
            );

            // RAW: the read returns the write's data.
            mem.put(0, &vec![0u8; n1]);
            let mut back = vec![0u8; m];
            let (c1, c2) = (next(), next());
            i.ep.write(&a, at, mem.addr(0), key, Context(c1)).unwrap();
            // SAFETY: `back` outlives the read, read after its completion.
            unsafe { i.ep.read(&mut back, at, mem.addr(0), key, Context(c2)) }.unwrap();
            done_all(i, &both, &[c1, c2]);
            assert!(back[..] == a[..m], "RAW, {what}");

            // WAR: the read returns the data from before the write.
            let old = pattern(n1, seed + 200);
            mem.put(0, &old);
            let mut back = vec![0u8; n1];
            let (c1, c2) = (next(), next());
            // SAFETY: as above.
            unsafe { i.ep.read(&mut back, at, mem.addr(0), key, Context(c1)) }.unwrap();
            i.ep.write(&b, at, mem.addr(0), key, Context(c2)).unwrap();
            done_all(i, &both, &[c1, c2]);
            assert!(back == old, "WAR, {what}");
            assert!(mem.bytes(0, n2) == b, "WAR, {what}: the write");

            // SAW: once the send's receive completed, the earlier write is visible.
            mem.put(0, &vec![0u8; n1]);
            let mut rbuf = vec![0u8; n2];
            // SAFETY: `rbuf` outlives the receive, read after its completion.
            unsafe { t.ep.recv(&mut rbuf, FiAddr::UNSPEC, Context(1)) }.unwrap();
            let (c1, c2) = (next(), next());
            i.ep.write(&a, at, mem.addr(0), key, Context(c1)).unwrap();
            i.ep.send(&b, at, Context(c2)).unwrap();
            done(t, &[&i.domain], 1);
            assert!(mem.bytes(0, n1) == a, "SAW, {what}");
            assert!(rbuf == b);
            done_all(i, &both, &[c1, c2]);

            // WAS: a write is not performed before an earlier send was processed: while
            // the target has not progressed, the write is not there; afterwards the
            // message and the write both are.
            mem.put(0, &vec![0u8; n2]);
            let (c1, c2) = (next(), next());
            let mut rbuf = vec![0u8; n1];
            i.ep.send(&a, at, Context(c1)).unwrap();
            i.ep.write(&b, at, mem.addr(0), key, Context(c2)).unwrap();
            i.domain.progress();
            assert!(
                mem.bytes(0, n2).iter().all(|&x| x == 0),
                "WAS, {what}: the write overtook the send"
            );
            // SAFETY: as above.
            unsafe { t.ep.recv(&mut rbuf, FiAddr::UNSPEC, Context(2)) }.unwrap();
            done(t, &[&i.domain], 2);
            assert!(rbuf == a);
            done_all(i, &both, &[c1, c2]);
            assert!(mem.bytes(0, n2) == b, "WAS, {what}");

            // RAS: a read is not performed before an earlier send was processed: the
            // memory changed after both were posted, while the target has not
            // progressed, is what the read returns.
            mem.put(0, &pattern(n2, seed + 300));
            let new = pattern(n2, seed + 301);
            let (c1, c2) = (next(), next());
            let mut back = vec![0u8; n2];
            i.ep.send(&a, at, Context(c1)).unwrap();
            // SAFETY: as above.
            unsafe { i.ep.read(&mut back, at, mem.addr(0), key, Context(c2)) }.unwrap();
            i.domain.progress();
            mem.put(0, &new);
            let mut rbuf = vec![0u8; n1];
            // SAFETY: as above.
            unsafe { t.ep.recv(&mut rbuf, FiAddr::UNSPEC, Context(3)) }.unwrap();
            done(t, &[&i.domain], 3);
            done_all(i, &both, &[c1, c2]);
            assert!(back == new, "RAS, {what}: the read overtook the send");

            // SAR: a send is processed after an earlier read: the target changing the
            // memory on taking the message does not change what the read returned.
            let old = pattern(n1, seed + 400);
            mem.put(0, &old);
            let mut back = vec![0u8; n1];
            let mut rbuf = vec![0u8; n2];
            // SAFETY: as above.
            unsafe { t.ep.recv(&mut rbuf, FiAddr::UNSPEC, Context(4)) }.unwrap();
            let (c1, c2) = (next(), next());
            // SAFETY: as above.
            unsafe { i.ep.read(&mut back, at, mem.addr(0), key, Context(c1)) }.unwrap();
            i.ep.send(&b, at, Context(c2)).unwrap();
            done(t, &[&i.domain], 4);
            mem.put(0, &vec![0xaa; n1]);
            done_all(i, &both, &[c1, c2]);
            assert!(back == old, "SAR, {what}");

            // RAR: reads complete in order, each with the memory's data.
            let (c1, c2) = (next(), next());
            let (mut r1, mut r2) = (vec![0u8; n1], vec![0u8; n2]);
            mem.put(0, &a);
            // SAFETY: as above.
            unsafe {
                i.ep.read(&mut r1, at, mem.addr(0), key, Context(c1))
                    .unwrap();
                i.ep.read(&mut r2, at, mem.addr(0), key, Context(c2))
                    .unwrap();
            }
            done_all(i, &both, &[c1, c2]);
            assert!(r1 == a && r2[..m] == a[..m], "RAR, {what}");
        }
    }
    sas(i, t, at);
    atomic_orders(i, t, at, mem);
}

/// SAS, and the receive side's comp_order: messages of every size, untagged and
/// tagged, sent back to back, complete at the target in sending order (receives posted
/// first, and messages taken as unexpected ones before the receives come).
fn sas<S: Tagged>(i: &Node<S>, t: &Node<S>, at: FiAddr) {
    let both = [&i.domain, &t.domain];
    let sizes: Vec<usize> = SIZES.iter().chain(SIZES.iter().rev()).copied().collect();
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| pattern(n, k as u64))
        .collect();
    for posted_first in [true, false] {
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
        let post = |bufs: &mut Vec<Vec<u8>>| {
            for (k, b) in bufs.iter_mut().enumerate() {
                // Alternate tagged and untagged: both queues keep order.
                // SAFETY: `bufs` outlives the receives, read after their completion.
                unsafe {
                    if k % 2 == 0 {
                        t.ep.recv(b, FiAddr::UNSPEC, Context(k)).unwrap();
                    } else {
                        t.ep.trecv(b, FiAddr::UNSPEC, 0, u64::MAX, Context(k))
                            .unwrap();
                    }
                }
            }
        };
        if posted_first {
            post(&mut bufs);
        }
        for (k, m) in msgs.iter().enumerate() {
            if k % 2 == 0 {
                i.ep.send(m, at, Context(k)).unwrap();
            } else {
                i.ep.tsend(m, at, k as u64, Context(k)).unwrap();
            }
        }
        if !posted_first {
            for _ in 0..4 {
                t.domain.progress();
                i.domain.progress();
            }
            post(&mut bufs);
        }
        for (k, &n) in sizes.iter().enumerate() {
            assert_eq!(done(t, &[&i.domain], k).len, n, "SAS: message {k}");
        }
        done_all(i, &both, &(0..msgs.len()).collect::<Vec<_>>());
        assert!(bufs == msgs, "SAS: payloads");
    }
}

/// Atomics are reads and writes for ordering: a write then a fetching atomic, an
/// atomic then a read, an atomic then a send, all kept in order; completions in
/// posting order across the kinds of operation.
fn atomic_orders<S: Tagged>(i: &Node<S>, t: &Node<S>, at: FiAddr, mem: &dyn Mem) {
    let both = [&i.domain, &t.domain];
    let key = mem.key();
    mem.put(0, &[0; 16]);
    i.ep.write(&7u64.to_ne_bytes(), at, mem.addr(0), key, Context(1))
        .unwrap();
    let mut old = [0u8; 8];
    // SAFETY: `old` outlives the atomic, read after its completion.
    unsafe {
        i.ep.fetch_atomic(
            &3u64.to_ne_bytes(),
            &mut old,
            Datatype::Uint64,
            AtomicOp::Sum,
            at,
            mem.addr(0),
            key,
            Context(2),
        )
    }
    .unwrap();
    i.ep.atomic(
        &[1; 8],
        Datatype::Uint8,
        AtomicOp::Bor,
        at,
        mem.addr(8),
        key,
        Context(3),
    )
    .unwrap();
    let mut back = [0u8; 16];
    // SAFETY: `back` outlives the read, read after its completion.
    unsafe { i.ep.read(&mut back, at, mem.addr(0), key, Context(4)) }.unwrap();
    let mut rbuf = [0u8; 1];
    // SAFETY: `rbuf` outlives the receive, read after its completion.
    unsafe { t.ep.recv(&mut rbuf, FiAddr::UNSPEC, Context(9)) }.unwrap();
    i.ep.atomic(
        &5u64.to_ne_bytes(),
        Datatype::Uint64,
        AtomicOp::Sum,
        at,
        mem.addr(0),
        key,
        Context(5),
    )
    .unwrap();
    i.ep.send(b"s", at, Context(6)).unwrap();
    done(t, &[&i.domain], 9);
    assert_eq!(
        mem.bytes(0, 8),
        15u64.to_ne_bytes(),
        "SAW with an atomic write"
    );
    done_all(i, &both, &[1, 2, 3, 4, 5, 6]);
    assert_eq!(u64::from_ne_bytes(old), 7, "an atomic after a write");
    assert_eq!(back[..8], 10u64.to_ne_bytes(), "a read after atomics");
    assert_eq!(back[8..], [1; 8]);
}

fn orders_ring<S: Tagged>() {
    let (i, t, at) = pair::<S>();
    let mut buf = vec![0u8; 2 * SIZES[3]];
    let mr = t.domain.mr_reg(&mut buf, &mr_attr(0x600)).unwrap();
    orders(&i, &t, at, &mr);
}

// ---------------------------------------------------------------------------------
// domain_attr: threading, progress, resource management, AV type
// ---------------------------------------------------------------------------------

/// FI_THREAD_SAFE with FI_PROGRESS_AUTO: several threads post on one endpoint at once,
/// and data progresses with nobody calling into the target (its memory is written
/// and its messages taken while it only sleeps).
fn safe_auto<S: Tagged>()
where
    Endpoint<S>: Sync,
{
    let (i, t, at) = pair::<S>();
    let d = &i.info.domain_attr;
    assert_eq!(d.threading, ThreadingLevel::Safe);
    assert_eq!(
        (d.data_progress, d.control_progress),
        (ProgressMode::Auto, ProgressMode::Auto)
    );
    let mut mem = vec![0u8; 64];
    let mr = t.domain.mr_reg(&mut mem, &mr_attr(0x700)).unwrap();
    const N: u64 = 200;
    std::thread::scope(|s| {
        for k in 0..4u64 {
            let ep = &i.ep;
            let addr = mr.addr(8 * k as usize);
            s.spawn(move || {
                for _ in 0..N {
                    // The rings are bounded (FI_RM_ENABLED): retry while the target's
                    // progress thread catches up.
                    let deadline = Instant::now() + DEADLINE;
                    while let Err(e) = ep.atomic(
                        &1u64.to_ne_bytes(),
                        Datatype::Uint64,
                        AtomicOp::Sum,
                        at,
                        addr,
                        0x700,
                        Context(k as usize),
                    ) {
                        assert_eq!(e, Error::Again);
                        assert!(Instant::now() < deadline);
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
    // Nobody calls into the target: its progress thread applies the atomics.
    let mut e = [CqTaggedEntry::default(); 1];
    let deadline = Instant::now() + DEADLINE;
    let mut n = 0;
    while n < 4 * N {
        match i.cq.sread(&mut e, 1, Some(Duration::from_millis(100))) {
            Ok(k) => n += k as u64,
            Err(Error::Again) => {}
            Err(err) => panic!("{err}"),
        }
        assert!(Instant::now() < deadline, "{n} completions");
    }
    for k in 0..4 {
        assert_eq!(mr.bytes(8 * k, 8), N.to_ne_bytes());
    }
}

/// FI_RM_ENABLED: more messages than the receive queue holds, sent to a target that
/// posts no receive, are not lost: queued as unexpected, delivered in order when the
/// receives come. `av_type` is the stack's: a table AV hands out 0, 1, 2, ...
fn rm_and_av<S: Tagged>() {
    let (i, t, at) = pair::<S>();
    let both = [&i.domain, &t.domain];
    let n = 2 * t.info.rx_attr.size;
    for k in 0..n {
        let deadline = Instant::now() + DEADLINE;
        loop {
            match i.ep.inject(&(k as u32).to_ne_bytes(), at) {
                Ok(()) => break,
                Err(Error::Again) => {
                    t.domain.progress();
                    assert!(Instant::now() < deadline);
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    for k in 0..n {
        let mut b = [0u8; 4];
        // SAFETY: `b` outlives the receive, which completes below.
        unsafe { t.ep.recv(&mut b, FiAddr::UNSPEC, Context(k)) }.unwrap();
        done(&t, &both, k);
        assert_eq!(u32::from_ne_bytes(b), k as u32, "message {k} of {n}");
    }
    if t.info.domain_attr.av_type == AvKind::Table {
        let av = t.domain.av(&AvAttr::DEFAULT).unwrap();
        for k in 0..3 {
            let other = open::<S>(&t.info);
            assert_eq!(av.insert(&other.ep.name()).unwrap(), FiAddr(k));
        }
    }
}

// ---------------------------------------------------------------------------------
// Atomics: every combination the valid queries accept, against a reference
// ---------------------------------------------------------------------------------

/// Element kinds, for the reference computation.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Int { bytes: usize, signed: bool },
    Real(usize),
    Complex(usize),
    Ld,
    LdComplex,
}

fn kind(dt: Datatype) -> Kind {
    use Datatype::*;
    let int = |bytes, signed| Kind::Int { bytes, signed };
    match dt {
        Int8 => int(1, true),
        Uint8 => int(1, false),
        Int16 => int(2, true),
        Uint16 => int(2, false),
        Int32 => int(4, true),
        Uint32 => int(4, false),
        Int64 => int(8, true),
        Uint64 => int(8, false),
        Int128 => int(16, true),
        Uint128 => int(16, false),
        Float => Kind::Real(4),
        Double => Kind::Real(8),
        FloatComplex => Kind::Complex(4),
        DoubleComplex => Kind::Complex(8),
        LongDouble => Kind::Ld,
        LongDoubleComplex => Kind::LdComplex,
    }
}

/// A real value in `w` bytes (4: `float`, 8: `double`, 16: x86 80-bit `long double`
/// with its padding zeroed), exact for the small integers used here.
fn enc_real(v: f64, w: usize) -> Vec<u8> {
    match w {
        4 => (v as f32).to_ne_bytes().to_vec(),
        8 => v.to_ne_bytes().to_vec(),
        _ => {
            let sign = if v.is_sign_negative() { 0x8000u16 } else { 0 };
            let mut out = vec![0u8; 16];
            if v != 0.0 {
                let bits = v.abs().to_bits();
                let exp = ((bits >> 52) as i64 - 1023 + 16383) as u16;
                let mant = (1u64 << 63) | ((bits & ((1 << 52) - 1)) << 11);
                out[..8].copy_from_slice(&mant.to_le_bytes());
                out[8..10].copy_from_slice(&(sign | exp).to_le_bytes());
            } else {
                out[8..10].copy_from_slice(&sign.to_le_bytes());
            }
            out
        }
    }
}

fn dec_real(b: &[u8]) -> f64 {
    match b.len() {
        4 => f32::from_ne_bytes(b.try_into().unwrap()) as f64,
        8 => f64::from_ne_bytes(b.try_into().unwrap()),
        _ => {
            let mant = u64::from_le_bytes(b[..8].try_into().unwrap());
            let se = u16::from_le_bytes(b[8..10].try_into().unwrap());
            let mag = if mant == 0 {
                0.0
            } else {
                let exp = (se & 0x7fff) as i32 - 16383;
                (mant as f64) * 2f64.powi(exp - 63)
            };
            if se & 0x8000 != 0 {
                -mag
            } else {
                mag
            }
        }
    }
}

/// What `op` leaves in an element holding `a`, with operand `b` and compare `c`, in
/// the datatype's own arithmetic (fi_atomic(3); integers wrap).
fn reference(k: Kind, op: AtomicOp, a: &[u8], b: &[u8], c: &[u8]) -> Vec<u8> {
    use AtomicOp::*;
    if op == AtomicRead {
        return a.to_vec();
    }
    if op == AtomicWrite {
        return b.to_vec();
    }
    match k {
        Kind::Int { bytes, signed } => {
            let raw = |x: &[u8]| {
                let mut w = [0u8; 16];
                w[..bytes].copy_from_slice(x);
                u128::from_le_bytes(w)
            };
            let (x, y, z) = (raw(a), raw(b), raw(c));
            let sh = 128 - 8 * bytes as u32;
            // Ordered comparison in the datatype's signedness.
            let lt = |p: u128, q: u128| {
                if signed {
                    ((p << sh) as i128) < ((q << sh) as i128)
                } else {
                    p < q
                }
            };
            let t = |v: bool| v as u128;
            let r = match op {
                Min => {
                    if lt(y, x) {
                        y
                    } else {
                        x
                    }
                }
                Max => {
                    if lt(x, y) {
                        y
                    } else {
                        x
                    }
                }
                Sum => x.wrapping_add(y),
                Prod => x.wrapping_mul(y),
                Lor => t(x != 0 || y != 0),
                Land => t(x != 0 && y != 0),
                Lxor => t((x != 0) != (y != 0)),
                Bor => x | y,
                Band => x & y,
                Bxor => x ^ y,
                Cswap => {
                    if z == x {
                        y
                    } else {
                        x
                    }
                }
                CswapNe => {
                    if z != x {
                        y
                    } else {
                        x
                    }
                }
                CswapLe => {
                    if !lt(x, z) {
                        y
                    } else {
                        x
                    }
                }
                CswapLt => {
                    if lt(z, x) {
                        y
                    } else {
                        x
                    }
                }
                CswapGe => {
                    if !lt(z, x) {
                        y
                    } else {
                        x
                    }
                }
                CswapGt => {
                    if lt(x, z) {
                        y
                    } else {
                        x
                    }
                }
                Mswap => (y & z) | (x & !z),
                AtomicRead | AtomicWrite => unreachable!(),
            };
            r.to_le_bytes()[..bytes].to_vec()
        }
        Kind::Real(_) | Kind::Ld => {
            let w = a.len();
            let (x, y, z) = (dec_real(a), dec_real(b), dec_real(c));
            let t = |v: bool| if v { 1.0 } else { 0.0 };
            let keep = a.to_vec();
            let swap = |v: bool| if v { b.to_vec() } else { keep.clone() };
            match op {
                Min => swap(y < x),
                Max => swap(y > x),
                Sum => enc_real(x + y, w),
                Prod => enc_real(x * y, w),
                Lor => enc_real(t(x != 0.0 || y != 0.0), w),
                Land => enc_real(t(x != 0.0 && y != 0.0), w),
                Lxor => enc_real(t((x != 0.0) != (y != 0.0)), w),
                Cswap => swap(z == x),
                CswapNe => swap(z != x),
                CswapLe => swap(z <= x),
                CswapLt => swap(z < x),
                CswapGe => swap(z >= x),
                CswapGt => swap(z > x),
                _ => unreachable!("{op:?} on a real"),
            }
        }
        Kind::Complex(_) | Kind::LdComplex => {
            let h = a.len() / 2;
            let parts = |v: &[u8]| (dec_real(&v[..h]), dec_real(&v[h..]));
            let ((ar, ai), (br, bi), (cr, ci)) = (parts(a), parts(b), parts(c));
            let enc = |re: f64, im: f64| [enc_real(re, h), enc_real(im, h)].concat();
            let nz = |r: f64, i: f64| r != 0.0 || i != 0.0;
            let t = |v: bool| enc(if v { 1.0 } else { 0.0 }, 0.0);
            let swap = |v: bool| if v { b.to_vec() } else { a.to_vec() };
            match op {
                Sum => enc(ar + br, ai + bi),
                Prod => enc(ar * br - ai * bi, ar * bi + ai * br),
                Lor => t(nz(ar, ai) || nz(br, bi)),
                Land => t(nz(ar, ai) && nz(br, bi)),
                Lxor => t(nz(ar, ai) != nz(br, bi)),
                Cswap => swap(cr == ar && ci == ai),
                CswapNe => swap(cr != ar || ci != ai),
                _ => unreachable!("{op:?} on a complex"),
            }
        }
    }
}

/// Element `e` of a test vector (seed `s`): small values, zeros and, for integers,
/// all-ones (the signed -1 and the unsigned maximum, for wrapping and signedness).
fn element(k: Kind, e: usize, s: usize) -> Vec<u8> {
    let v = ((e * 7 + s * 3) % 9) as i64 - 2;
    match k {
        Kind::Int { bytes, .. } => {
            let v = if (e + s) % 11 == 5 { -1 } else { v.abs() };
            (v as i128).to_le_bytes()[..bytes].to_vec()
        }
        Kind::Real(w) => enc_real(v as f64, w),
        Kind::Ld => enc_real(v as f64, 16),
        Kind::Complex(w) => [enc_real(v as f64, w), enc_real(((e + s) % 3) as f64, w)].concat(),
        Kind::LdComplex => [enc_real(v as f64, 16), enc_real(((e + s) % 3) as f64, 16)].concat(),
    }
}

/// Every (class, op, datatype): the endpoint's valid queries and the domain's
/// `query_atomic` agree; a supported one runs at 1, 3 and the advertised maximum count
/// with the target's new values and the fetched old ones checked against
/// [`reference`]; an unsupported one is refused at once with `FI_EOPNOTSUPP`.
fn atomics_sweep<S: Tagged>(i: &Node<S>, t: &Node<S>, at: FiAddr, mem: &dyn Mem) {
    // The reference encodes elements little-endian.
    const { assert!(cfg!(target_endian = "little")) };
    let both = [&i.domain, &t.domain];
    let key = mem.key();
    let mut ctx = 1000;
    let mut ran = 0;
    for class in AtomicClass::ALL {
        for op in AtomicOp::ALL {
            for dt in Datatype::ALL {
                let valid = match class {
                    AtomicClass::Base => i.ep.atomicvalid(dt, op),
                    AtomicClass::Fetch => i.ep.fetch_atomicvalid(dt, op),
                    AtomicClass::Compare => i.ep.compare_atomicvalid(dt, op),
                };
                assert_eq!(
                    valid,
                    i.domain.query_atomic(class, op, dt),
                    "{class:?} {op:?} {dt:?}"
                );
                let size = dt.size();
                let mut res = vec![0u8; MAX_ATOMIC_SIZE];
                let post = |n: usize, operand: &[u8], compare: &[u8], res: &mut [u8], ctx| {
                    let r = &mut res[..n * size];
                    match class {
                        AtomicClass::Base => {
                            i.ep.atomic(operand, dt, op, at, mem.addr(0), key, ctx)
                        }
                        // SAFETY: `res` outlives the atomic, read after its completion.
                        AtomicClass::Fetch => unsafe {
                            i.ep.fetch_atomic(operand, r, dt, op, at, mem.addr(0), key, ctx)
                        },
                        // SAFETY: as above.
                        AtomicClass::Compare => unsafe {
                            i.ep.compare_atomic(
                                operand,
                                compare,
                                r,
                                dt,
                                op,
                                at,
                                mem.addr(0),
                                key,
                                ctx,
                            )
                        },
                    }
                };
                let max = match valid {
                    Err(e) => {
                        assert_eq!(e, Error::OpNotSupp, "{class:?} {op:?} {dt:?}");
                        let z = vec![0u8; size];
                        let r = post(1, &z, &z, &mut res, Context(1));
                        assert_eq!(r, Err(Error::OpNotSupp), "{class:?} {op:?} {dt:?} posted");
                        continue;
                    }
                    Ok(max) => max,
                };
                assert_eq!(max, MAX_ATOMIC_SIZE / size, "{class:?} {op:?} {dt:?}");
                let k = kind(dt);
                for n in [1, 3, max] {
                    let vec_of = |s: fn(usize) -> usize| {
                        (0..n)
                            .flat_map(|e| element(k, e, s(e)))
                            .collect::<Vec<u8>>()
                    };
                    // Every other compare value equals the target's, so compares both
                    // succeed and fail.
                    let before = vec_of(|_| 0);
                    let operand = vec_of(|_| 1);
                    let compare = vec_of(|e| if e % 2 == 0 { 0 } else { 2 });
                    let operand = if op == AtomicOp::AtomicRead {
                        Vec::new()
                    } else {
                        operand
                    };
                    mem.put(0, &before);
                    ctx += 1;
                    post(n, &operand, &compare, &mut res, Context(ctx))
                        .unwrap_or_else(|e| panic!("{class:?} {op:?} {dt:?} x{n}: {e}"));
                    done(i, &both, ctx);
                    let want: Vec<u8> = (0..n)
                        .flat_map(|e| {
                            let r = e * size..(e + 1) * size;
                            let o = operand.get(r.clone()).unwrap_or(&[]);
                            reference(k, op, &before[r.clone()], o, &compare[r])
                        })
                        .collect();
                    let after = mem.bytes(0, n * size);
                    assert!(
                        after == want,
                        "{class:?} {op:?} {dt:?} x{n}: target\n{after:?}\n{want:?}"
                    );
                    if class != AtomicClass::Base {
                        assert!(
                            res[..n * size] == before,
                            "{class:?} {op:?} {dt:?} x{n}: fetched"
                        );
                    }
                    ran += 1;
                }
                // One element past the maximum is refused.
                let over = vec![0u8; (max + 1) * size];
                let mut big = vec![0u8; (max + 1) * size];
                let r = match class {
                    AtomicClass::Base => {
                        i.ep.atomic(&over, dt, op, at, mem.addr(0), key, Context(1))
                    }
                    // SAFETY: refused, nothing posted.
                    AtomicClass::Fetch => unsafe {
                        i.ep.fetch_atomic(&over, &mut big, dt, op, at, mem.addr(0), key, Context(1))
                    },
                    // SAFETY: refused, nothing posted.
                    AtomicClass::Compare => unsafe {
                        i.ep.compare_atomic(
                            &over,
                            &over,
                            &mut big,
                            dt,
                            op,
                            at,
                            mem.addr(0),
                            key,
                            Context(1),
                        )
                    },
                };
                assert!(
                    r.is_err(),
                    "{class:?} {op:?} {dt:?}: max count + 1 accepted"
                );
            }
        }
    }
    assert!(ran > 500, "{ran} atomics ran");
}

fn atomics_ring<S: Tagged>() {
    let (i, t, at) = pair::<S>();
    let mut buf = vec![0u8; MAX_ATOMIC_SIZE + 64];
    let mr = t.domain.mr_reg(&mut buf, &mr_attr(0x800)).unwrap();
    atomics_sweep(&i, &t, at, &mr);
}

// ---------------------------------------------------------------------------------
// shm: the direct path into published segments, and several processes
// ---------------------------------------------------------------------------------

impl<S: Config> Mem for fabric_shm::DirectMr<'_, S> {
    fn get(&self, off: usize, out: &mut [u8]) {
        self.mr().read(off, out).unwrap();
    }
    fn put(&self, off: usize, data: &[u8]) {
        self.mr().write(off, data).unwrap();
    }
    fn key(&self) -> u64 {
        self.mr().key()
    }
    fn addr(&self, off: usize) -> u64 {
        self.mr().remote_addr() + off as u64
    }
}

/// A published segment of `len` bytes of `t` under `key`, and the test run on it.
fn on_segment<S: Config<Provider = Shm> + Tagged>(
    len: usize,
    key: u64,
    f: impl FnOnce(&Node<S>, &Node<S>, FiAddr, &dyn Mem),
) {
    let (i, t, at) = pair::<S>();
    let mut seg = MappedSegment::new(len).unwrap();
    let mr = seg.register(&t.domain, &mr_attr(key)).unwrap();
    f(&i, &t, at, &mr);
}

/// The orderings when the target memory is a published segment, which the initiator
/// writes and reads itself when nothing of its own is in flight to the target.
fn orders_direct<S: Config<Provider = Shm> + Tagged>() {
    on_segment::<S>(2 * SIZES[3], 0x900, |i, t, at, m| orders(i, t, at, m));
}

/// The atomics sweep into a published segment: datatypes of up to 8 bytes are applied
/// by the initiator with CPU atomics, the others by the target.
fn atomics_direct<S: Config<Provider = Shm> + Tagged>() {
    on_segment::<S>(MAX_ATOMIC_SIZE + 64, 0x901, |i, t, at, m| {
        atomics_sweep(i, t, at, m)
    });
}

/// Fetch-adds of one process.
const ADDS: u64 = 3000;
/// The key of the parent's published segment.
const SEG_KEY: u64 = 0xa70;

/// Two processes update the same words of a third's published segment at once, one
/// through the direct path (CPU atomics at the initiator), one through the ring path
/// (each atomic behind a message the target has not taken yet, so the target applies
/// it, with CPU atomics too): a 64-bit integer sum (one instruction on both paths), a
/// double sum (a compare-and-swap loop on both) and a two-element 32-bit sum. No
/// update is lost, and each process sees its fetched values grow.
#[test]
fn shm_atomics_through_both_paths_lose_nothing() {
    let t = open::<Stack<Shm>>(&rdm::<Stack<Shm>>());
    let mut seg = MappedSegment::new(4096).unwrap();
    let mr = seg.register(&t.domain, &mr_attr(SEG_KEY)).unwrap();
    let name = hex(&t.ep.name());
    let mut kids: Vec<Kid> = ["direct", "ring"]
        .into_iter()
        .map(|role| {
            let mut k = Kid::spawn(role, "default", &[]);
            k.say(&format!("PEER {name}"));
            k
        })
        .collect();
    // Each process's probe behaved as its path does while this one never progressed.
    for k in &kids {
        k.expect("READY");
    }
    for k in &mut kids {
        k.say("GO");
    }
    // The ring process's messages are taken by receives kept posted here.
    let mut bufs = [[0u8; 1]; 64];
    for (k, b) in bufs.iter_mut().enumerate() {
        // SAFETY: `bufs` outlives the receives, canceled or completed below.
        unsafe { t.ep.trecv(b, FiAddr::UNSPEC, 1, 0, Context(k)) }.unwrap();
    }
    let deadline = Instant::now() + DEADLINE;
    let (mut finished, mut msgs) = (0, 0u64);
    let mut e = [CqTaggedEntry::default(); 16];
    while finished < kids.len() {
        if let Ok(n) = t.cq.read(&mut e) {
            for x in &e[..n] {
                msgs += 1;
                let k = x.op_context.0;
                // SAFETY: as above.
                unsafe { t.ep.trecv(&mut bufs[k], FiAddr::UNSPEC, 1, 0, Context(k)) }.unwrap();
            }
        }
        for k in &kids {
            if let Ok(l) = k.lines.try_recv() {
                assert_eq!(l, "DONE");
                finished += 1;
            }
        }
        assert!(Instant::now() < deadline, "the updates did not finish");
    }
    for k in kids {
        k.finish();
    }
    let word = |off| {
        mr.local_u64(off)
            .unwrap()
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    let n = 2 * ADDS;
    assert_eq!(word(0), n, "u64 sums");
    assert_eq!(f64::from_bits(word(8)), n as f64, "double sums");
    let w = word(16).to_ne_bytes();
    let half = |r: std::ops::Range<usize>| u32::from_ne_bytes(w[r].try_into().unwrap());
    assert_eq!(
        (half(0..4), half(4..8)),
        (n as u32, 2 * n as u32),
        "u32 pairs"
    );
    // One message ahead of every ring-path atomic, and of the probe.
    assert_eq!(msgs, 3 * ADDS + 1, "messages of the ring process");
}

/// The child side: `direct` (updates through the direct path, after a probe that must
/// complete with the target not progressing) or `ring` (each update behind a message
/// the target has not taken, after a probe that must not complete without it).
fn role_updater(ctl: &Ctl, direct: bool) {
    type S = Stack<Shm>;
    let n = open::<S>(&rdm::<S>());
    let target = unhex(&ctl.expect("PEER"));
    let at = n.av.insert(&target).unwrap();
    let ahead = || {
        if !direct {
            let deadline = Instant::now() + DEADLINE;
            while let Err(e) = n.ep.tinject(b"r", at, 1) {
                assert_eq!(e, Error::Again);
                assert!(Instant::now() < deadline);
            }
        }
    };
    let post = |operand: &[u8], old: &mut [u8], dt, off: u64| {
        ahead();
        // SAFETY: `old` outlives the atomic, whose completion is read before it is.
        unsafe {
            n.ep.fetch_atomic(
                operand,
                old,
                dt,
                AtomicOp::Sum,
                at,
                off,
                SEG_KEY,
                Context(1),
            )
        }
        .unwrap();
    };
    let complete = || {
        let deadline = Instant::now() + DEADLINE;
        let mut e = [CqTaggedEntry::default(); 1];
        loop {
            match n.cq.read(&mut e) {
                Ok(1) => break,
                Err(Error::Again) => assert!(Instant::now() < deadline),
                other => panic!("{other:?}"),
            }
        }
    };
    // The probe, a fetch-add of 0, while the target does not progress.
    let mut old = [0u8; 8];
    post(&0u64.to_ne_bytes(), &mut old, Datatype::Uint64, 24);
    let mut e = [CqTaggedEntry::default(); 1];
    if direct {
        assert_eq!(
            n.cq.read(&mut e),
            Ok(1),
            "the direct probe waited for the target"
        );
    } else {
        let until = Instant::now() + Duration::from_millis(20);
        while Instant::now() < until {
            assert_eq!(
                n.cq.read(&mut e),
                Err(Error::Again),
                "the ring probe went direct"
            );
        }
    }
    ctl.report("READY");
    ctl.expect("GO");
    if !direct {
        complete();
    }
    let (mut last, mut last_f) = (None, None);
    let mut pair_old = [0u8; 8];
    let two: Vec<u8> = [1u32.to_ne_bytes(), 2u32.to_ne_bytes()].concat();
    for _ in 0..ADDS {
        post(&1u64.to_ne_bytes(), &mut old, Datatype::Uint64, 0);
        complete();
        let v = u64::from_ne_bytes(old);
        assert!(last.is_none_or(|l| v > l), "fetched u64 values grow");
        last = Some(v);
        post(&1f64.to_ne_bytes(), &mut old, Datatype::Double, 8);
        complete();
        let f = f64::from_ne_bytes(old);
        assert!(last_f.is_none_or(|l| f > l), "fetched doubles grow");
        last_f = Some(f);
        post(&two, &mut pair_old, Datatype::Uint32, 16);
        complete();
    }
    ctl.report("DONE");
}

/// Entry point of child processes (does nothing unless started as one).
#[test]
#[ignore = "child process of the cross-process tests"]
fn child_entry() {
    let (Ok(role), Ok(_stack)) = (std::env::var(ROLE), std::env::var(STACK)) else {
        return;
    };
    let ctl = Ctl::new();
    match role.as_str() {
        "direct" => role_updater(&ctl, true),
        "ring" => role_updater(&ctl, false),
        other => panic!("unknown role {other:?}"),
    }
}

// ---------------------------------------------------------------------------------
// Instantiation per provider
// ---------------------------------------------------------------------------------

/// One test per body and provider, on the default stack (FI_THREAD_DOMAIN, manual
/// progress: the target progresses only when a test says so).
macro_rules! per_provider {
    ($m:ident = $prov:ty: $($body:ident),* $(,)?) => {
        mod $m {
            $(
                #[test]
                fn $body() {
                    super::$body::<fabric::Stack<$prov>>();
                }
            )*
            #[test]
            #[ignore = "opens ep_cnt endpoints and mr_cnt regions: minutes in debug builds"]
            fn domain_capacity() {
                super::domain_capacity::<fabric::Stack<$prov>>();
            }
            #[test]
            fn safe_auto() {
                super::safe_auto::<fabric::Stack<$prov, fabric::ThreadSafe, fabric::Auto>>();
            }
        }
    };
}

per_provider!(loopback = fabric_loopback::Loopback: identity, caps_usable, inject_size, iov_limits, queue_sizes,
    max_msg_size, data_tag_key_sizes, mr_attrs, domain_counts, orders_ring, rm_and_av,
    atomics_ring);
per_provider!(shm = fabric_shm::Shm: identity, caps_usable, inject_size, iov_limits, queue_sizes,
    max_msg_size, data_tag_key_sizes, mr_attrs, domain_counts, orders_ring, rm_and_av,
    atomics_ring, orders_direct, atomics_direct);

/// The core's candidate is what both providers start from: its attributes are the ones
/// the tests above check.
#[test]
fn providers_use_the_core_candidate() {
    for (got, inject, max, eps) in [
        (
            fabric_loopback::Loopback::candidates(),
            fabric_loopback::INJECT_SIZE,
            fabric_loopback::MAX_MSG_SIZE,
            1 << 16,
        ),
        (
            Shm::candidates(),
            fabric_shm::INJECT_SIZE,
            fabric_shm::MAX_MSG_SIZE,
            1 << 12,
        ),
    ] {
        for c in got {
            let mut want = core_candidate(
                c.fabric_attr.prov_name,
                c.fabric_attr.prov_version,
                c.ep_attr.ep_type,
                inject,
                max,
                eps,
            );
            // A connection has no AV: nothing of what needs one is claimed.
            if c.ep_attr.ep_type == EpType::Msg {
                let no_av =
                    Caps::SOURCE | Caps::DIRECTED_RECV | Caps::NAMED_RX_CTX | Caps::SHARED_AV;
                want.caps.remove(no_av);
                want.tx_attr.caps.remove(no_av);
                want.rx_attr.caps.remove(no_av);
            }
            assert_eq!(c, want);
        }
    }
}
