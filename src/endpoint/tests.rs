//! The core's handlers against payloads that stay with the sender ([`Payload::Remote`]),
//! and against arbitrary headers from a hostile peer.
//!
//! `Far` is a test transport in the shape of an intra-node provider: packets go
//! through a locked queue per endpoint, and a payload of at least `remote_from` bytes
//! (atomic operands excepted, unless `remote_atomics`) is not copied into the packet
//! but handed to the receiver as a [`VecPull`] that reads the sender's bytes and can
//! be told to fail past an offset (a sender dying mid-copy). Everything above the
//! transport is the real core, driven through the public endpoint calls.
#![allow(unsafe_code)] // only the `unsafe` posting calls (receives, reads, fetches)

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use crate::attr::{
    AddrFormat, AvAttr, CntrAttr, CqAttr, DomainAttr, EpAttr, EpType, FabricAttr, MrAttr,
    ResourceMgmt, RxAttr, TxAttr,
};
use crate::flags::{BindFlags, Caps, CqFlags, Mode, MrAccess, MrMode, OpFlags, Order};
use crate::lock::Lock;
use crate::prelude::*;
use crate::provider::wire::{Header, Op};
use crate::provider::{Payload, Pull};
use crate::waitobj::Waiter;
use crate::AtomicClass;

/// Payload bytes kept at the sender. Bytes at offsets `fail_at..` are lost (the
/// sender died); `pulled` counts the bytes receivers copied out.
struct VecPull {
    data: Vec<u8>,
    fail_at: usize,
    pulled: Arc<AtomicUsize>,
}

impl Pull for VecPull {
    fn len(&self) -> usize {
        self.data.len()
    }

    fn read(&self, off: usize, dst: &mut [u8]) -> Result<()> {
        let end = off
            .checked_add(dst.len())
            .filter(|&e| e <= self.data.len())
            .ok_or(Error::Io)?;
        let good = end.min(self.fail_at.max(off));
        dst[..good - off].copy_from_slice(&self.data[off..good]);
        self.pulled.fetch_add(good - off, Ordering::Relaxed);
        if good < end {
            return Err(Error::Io);
        }
        Ok(())
    }
}

enum Body {
    Inline(Vec<u8>),
    Remote(VecPull),
}

struct Packet {
    hdr: Header,
    src: [u8; 8],
    body: Body,
}

/// An endpoint's incoming queue, as peers see it.
struct FarInbox {
    id: u64,
    q: Mutex<VecDeque<Packet>>,
    closed: AtomicBool,
    waker: OnceLock<Arc<Waiter>>,
}

impl FarInbox {
    fn q(&self) -> MutexGuard<'_, VecDeque<Packet>> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn registry() -> MutexGuard<'static, HashMap<u64, Weak<FarInbox>>> {
    static REG: OnceLock<Mutex<HashMap<u64, Weak<FarInbox>>>> = OnceLock::new();
    REG.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The test transport; the knobs apply to what this endpoint sends.
struct FarEp {
    inbox: Arc<FarInbox>,
    name: [u8; 8],
    /// Payloads of at least this many bytes stay with the sender.
    remote_from: AtomicUsize,
    /// Remote payloads fail past this offset.
    fail_at: AtomicUsize,
    /// Atomic operands go remote too (a broken transport).
    remote_atomics: AtomicBool,
    /// Responses are refused with `Again` (a transport breaking its contract).
    refuse_responses: AtomicBool,
    /// Bytes receivers pulled from this endpoint's payloads.
    pulled: Arc<AtomicUsize>,
}

impl FarEp {
    fn remote_from(&self, n: usize) -> &Self {
        self.remote_from.store(n, Ordering::Relaxed);
        self
    }
    fn fail_at(&self, n: usize) -> &Self {
        self.fail_at.store(n, Ordering::Relaxed);
        self
    }
    fn pulled(&self) -> usize {
        self.pulled.load(Ordering::Relaxed)
    }
    fn queued(&self) -> usize {
        self.inbox.q().len()
    }
    /// Queues a raw packet as if `src` had sent it.
    fn inject(&self, hdr: Header, src: [u8; 8], body: Body) {
        self.inbox.q().push_back(Packet { hdr, src, body });
    }
}

enum Far {}

impl Transport for FarEp {
    type Peer = Arc<FarInbox>;
    type Sender = ();
    type Receiver = ();
    type Pull = VecPull;
    type Direct = crate::provider::Absent;
    type HeldBack = crate::provider::Absent;
    type RemoteWake = crate::provider::Absent;
    type Cm = crate::provider::Absent;

    fn name(&self) -> &[u8] {
        &self.name
    }
    fn sender(&self) {}
    fn receiver(&self) {}

    fn send(
        &self,
        _tx: &mut (),
        to: &Arc<FarInbox>,
        hdr: &Header,
        payload: &[&[u8]],
    ) -> Result<()> {
        if to.closed.load(Ordering::Acquire) {
            return Err(Error::HostUnreach);
        }
        let data = payload.concat();
        let op = Op::from_raw(hdr.op);
        if self.refuse_responses.load(Ordering::Relaxed)
            && matches!(op, Some(Op::Ack | Op::ReadResp | Op::AtomicResp))
        {
            return Err(Error::Again);
        }
        let remote = data.len() >= self.remote_from.load(Ordering::Relaxed)
            && !matches!(op, Some(Op::ReadReq | Op::Ack))
            && (op != Some(Op::Atomic) || self.remote_atomics.load(Ordering::Relaxed));
        let body = if remote {
            Body::Remote(VecPull {
                data,
                fail_at: self.fail_at.load(Ordering::Relaxed),
                pulled: self.pulled.clone(),
            })
        } else {
            Body::Inline(data)
        };
        to.q().push_back(Packet {
            hdr: *hdr,
            src: self.name,
            body,
        });
        if let Some(w) = to.waker.get() {
            w.signal();
        }
        Ok(())
    }

    fn poll<F: FnMut(&Header, &[u8], Payload<'_, VecPull>) -> bool>(
        &self,
        _rx: &mut (),
        mut f: F,
    ) -> usize {
        let mut n = 0;
        loop {
            // Not locked while handled: the handler may send to this endpoint.
            let Some(p) = self.inbox.q().pop_front() else {
                return n;
            };
            let payload = match &p.body {
                Body::Inline(v) => Payload::Inline(v[..].into()),
                Body::Remote(r) => Payload::Remote(r),
            };
            if !f(&p.hdr, &p.src, payload) {
                self.inbox.q().push_front(p);
                return n;
            }
            n += 1;
        }
    }

    fn set_waker(&self, waker: Arc<Waiter>) {
        let _ = self.inbox.waker.set(waker);
    }

    fn shutdown(&self) {
        self.inbox.closed.store(true, Ordering::Release);
        registry().remove(&self.inbox.id);
    }
}

impl Drop for FarEp {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Provider for Far {
    const NAME: &'static str = "far";
    const VERSION: u32 = 1 << 16;
    type InjectSize = typenum::U64;
    const MAX_MSG_SIZE: usize = 1 << 20;
    type Peer = Arc<FarInbox>;
    type Transport = FarEp;

    fn candidates() -> Vec<Info> {
        let caps = Caps::MSG
            | Caps::TAGGED
            | Caps::RMA
            | Caps::ATOMIC
            | Caps::MULTI_RECV
            | Caps::SOURCE
            | Caps::DIRECTED_RECV;
        vec![Info {
            caps,
            mode: Mode::empty(),
            addr_format: AddrFormat::Proto,
            tx_attr: TxAttr {
                caps,
                msg_order: Order::STRICT,
                comp_order: Order::STRICT,
                inject_size: 64,
                size: 64,
                iov_limit: crate::limits::IOV_LIMIT,
                rma_iov_limit: 1,
                ..TxAttr::default()
            },
            rx_attr: RxAttr {
                caps,
                msg_order: Order::STRICT,
                comp_order: Order::STRICT,
                size: 64,
                iov_limit: crate::limits::IOV_LIMIT,
                ..RxAttr::default()
            },
            ep_attr: EpAttr {
                ep_type: EpType::Rdm,
                max_msg_size: Self::MAX_MSG_SIZE,
                mem_tag_format: u64::MAX,
                tx_ctx_cnt: 1,
                rx_ctx_cnt: 1,
                ..EpAttr::default()
            },
            domain_attr: DomainAttr {
                name: "far",
                resource_mgmt: ResourceMgmt::Enabled,
                mr_mode: MrMode::empty(),
                mr_key_size: 8,
                cq_data_size: 8,
                mr_iov_limit: 4,
                ..DomainAttr::default()
            },
            fabric_attr: FabricAttr {
                name: "far",
                prov_name: "far",
                prov_version: Self::VERSION,
                api_version: (1 << 16) | 17,
            },
            ..Info::default()
        }]
    }

    fn open(_info: &Info) -> Result<FarEp> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let inbox = Arc::new(FarInbox {
            id,
            q: Mutex::new(VecDeque::new()),
            closed: AtomicBool::new(false),
            waker: OnceLock::new(),
        });
        registry().insert(id, Arc::downgrade(&inbox));
        Ok(FarEp {
            inbox,
            name: id.to_le_bytes(),
            remote_from: AtomicUsize::new(usize::MAX),
            fail_at: AtomicUsize::new(usize::MAX),
            remote_atomics: AtomicBool::new(false),
            refuse_responses: AtomicBool::new(false),
            pulled: Arc::new(AtomicUsize::new(0)),
        })
    }

    fn resolve(name: &[u8]) -> Result<Arc<FarInbox>> {
        let id: [u8; 8] = name.try_into().map_err(|_| Error::Inval)?;
        registry()
            .get(&u64::from_le_bytes(id))
            .and_then(Weak::upgrade)
            .ok_or(Error::AddrNotAvail)
    }

    fn name_from_svc(_node: &str, service: &str) -> Result<Vec<u8>> {
        let id: u64 = service.parse().map_err(|_| Error::Inval)?;
        Ok(id.to_le_bytes().to_vec())
    }

    fn straddr(name: &[u8]) -> String {
        format!("far://{name:?}")
    }
}

type Net = Stack<Far>;

struct Node {
    domain: Domain<Net>,
    cq: Cq<Net>,
    av: AddressVector<Net>,
    ep: Endpoint<Net>,
    /// `TRANSMIT | READ | WRITE`.
    cntr_tx: Counter<Net>,
    /// `RECV | REMOTE_WRITE | REMOTE_READ`.
    cntr_rx: Counter<Net>,
}

impl Node {
    fn far(&self) -> &FarEp {
        &self.ep.ep().transport
    }
}

fn node() -> Node {
    let info = Far::candidates().remove(0);
    let fabric = Fabric::<Net>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    let cntr_tx = domain.cntr(&CntrAttr::DEFAULT).unwrap();
    let cntr_rx = domain.cntr(&CntrAttr::DEFAULT).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.bind_cntr(
        &cntr_tx,
        BindFlags::TRANSMIT | BindFlags::READ | BindFlags::WRITE,
    )
    .unwrap();
    ep.bind_cntr(
        &cntr_rx,
        BindFlags::RECV | BindFlags::REMOTE_WRITE | BindFlags::REMOTE_READ,
    )
    .unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    Node {
        domain,
        cq,
        av,
        ep,
        cntr_tx,
        cntr_rx,
    }
}

/// Two nodes and each one's address at the other: `(a, b, b at a, a at b)`.
fn pair() -> (Node, Node, FiAddr, FiAddr) {
    let (a, b) = (node(), node());
    let b_at_a = a.av.insert(&b.ep.name()).unwrap();
    let a_at_b = b.av.insert(&a.ep.name()).unwrap();
    (a, b, b_at_a, a_at_b)
}

/// The next entry of `cq`, success or error, progressing `others` meanwhile.
fn next(cq: &Cq<Net>, others: &[&Domain<Net>]) -> std::result::Result<CqTaggedEntry, CqErrEntry> {
    let mut e = [CqTaggedEntry::default(); 1];
    for _ in 0..1000 {
        for d in others {
            d.progress();
        }
        match cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Ok(_) | Err(Error::Again) => {}
            Err(Error::Avail) => return Err(cq.read_err().unwrap()),
            Err(err) => panic!("cq read: {err}"),
        }
    }
    panic!("no completion");
}

#[track_caller]
fn ok(cq: &Cq<Net>, others: &[&Domain<Net>]) -> CqTaggedEntry {
    next(cq, others).unwrap_or_else(|e| panic!("error entry {e:?}"))
}

#[track_caller]
fn err(cq: &Cq<Net>, others: &[&Domain<Net>]) -> CqErrEntry {
    match next(cq, others) {
        Err(e) => e,
        Ok(e) => panic!("success entry {e:?}"),
    }
}

#[track_caller]
fn assert_quiet(cq: &Cq<Net>, others: &[&Domain<Net>]) {
    for d in others {
        d.progress();
    }
    let mut e = [CqTaggedEntry::default(); 1];
    assert_eq!(cq.read(&mut e), Err(Error::Again));
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) | 1)
        .collect()
}

const TAGGED_RECV: CqFlags = CqFlags::RECV.union(CqFlags::TAGGED);

#[test]
fn remote_message_lands_in_the_posted_receive() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0);
    let msg = pattern(200, 3);
    let mut buf = vec![0u8; 256];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 7, 0, Context(11)) }.unwrap();
    a.ep.tsend(&msg, b_at_a, 7, Context(1)).unwrap();
    let e = ok(&b.cq, &[]);
    assert_eq!(
        (e.op_context, e.flags, e.len, e.tag, e.buf),
        (Context(11), TAGGED_RECV, 200, 7, buf.as_ptr() as usize)
    );
    assert_eq!(&buf[..200], &msg[..]);
    assert!(buf[200..].iter().all(|&x| x == 0));
    // Straight from the sender, once.
    assert_eq!(a.far().pulled(), 200);
    assert_eq!(b.cntr_rx.read(), 1);
    assert_eq!(ok(&a.cq, &[]).op_context, Context(1));
    // Small messages may still travel inline on the same transport.
    a.far().remote_from(usize::MAX);
    // SAFETY: as above.
    unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 8, 0, Context(12)) }.unwrap();
    a.ep.tsend(b"tiny", b_at_a, 8, Context(2)).unwrap();
    assert_eq!(ok(&b.cq, &[]).len, 4);
    assert_eq!(&buf[..4], b"tiny");
    assert_eq!(a.far().pulled(), 200);
}

#[test]
fn remote_unexpected_is_copied_at_arrival_then_received() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0);
    let m1 = pattern(300, 1);
    let m2 = pattern(40, 2);
    a.ep.tsend(&m1, b_at_a, 5, Context(1)).unwrap();
    a.ep.send(&m2, b_at_a, Context(2)).unwrap();
    b.domain.progress();
    // Both were consumed (the sender may release them): their bytes are already here.
    assert_eq!(b.far().queued(), 0);
    assert_eq!(a.far().pulled(), 340);
    let mut t = vec![0u8; 300];
    let mut u = vec![0u8; 64];
    // SAFETY: the buffers outlive the receives, read after their completions.
    unsafe { b.ep.trecv(&mut t, FiAddr::UNSPEC, 5, 0, Context(21)) }.unwrap();
    let e = ok(&b.cq, &[]);
    assert_eq!((e.op_context, e.len, e.tag), (Context(21), 300, 5));
    assert_eq!(t, m1);
    // SAFETY: as above.
    unsafe { b.ep.recv(&mut u, FiAddr::UNSPEC, Context(22)) }.unwrap();
    let e = ok(&b.cq, &[]);
    assert_eq!(
        (e.op_context, e.flags, e.len),
        (Context(22), CqFlags::RECV | CqFlags::MSG, 40)
    );
    assert_eq!(&u[..40], &m2[..]);
    assert_eq!(a.far().pulled(), 340);
    // The unexpected-message buffers went back to the pool, and the next arrival
    // takes one from it.
    let pooled = || b.ep.ep().rx[0].state.with(|st| st.pool.len());
    assert_eq!(pooled(), 2);
    a.ep.tsend(&pattern(300, 9), b_at_a, 5, Context(3)).unwrap();
    b.domain.progress();
    assert_eq!(pooled(), 1);
}

#[test]
fn remote_messages_fill_a_multi_receive_buffer() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0);
    let mut buf = vec![0u8; 256];
    {
        let mut iov: [&mut [u8]; 1] = [&mut buf];
        let mut m = MsgMut {
            iov: &mut iov,
            addr: FiAddr::UNSPEC,
            context: Context(30),
        };
        // SAFETY: `buf` outlives the receive; read after the MULTI_RECV completion.
        unsafe { b.ep.recvmsg(&mut m, OpFlags::MULTI_RECV) }.unwrap();
    }
    let base = buf.as_ptr() as usize;
    let msgs: Vec<Vec<u8>> = (0..4).map(|i| pattern(60, 10 + i)).collect();
    // One before and the rest after a first completion: arrivals append in order.
    for (i, m) in msgs.iter().enumerate() {
        a.ep.send(m, b_at_a, Context(i)).unwrap();
        let e = ok(&b.cq, &[]);
        assert_eq!(
            (e.op_context, e.len, e.buf),
            (Context(30), 60, base + 60 * i)
        );
        // 256 - 60 * 4 = 16 < 64 (FI_OPT_MIN_MULTI_RECV) releases the buffer.
        let last = i == 3;
        assert_eq!(e.flags.contains(CqFlags::MULTI_RECV), last, "entry {i}");
    }
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!(&buf[60 * i..60 * (i + 1)], &m[..]);
    }
    assert_eq!(a.far().pulled(), 240);
}

#[test]
fn remote_message_truncates_with_olen() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0);
    let msg = pattern(100, 4);
    let mut buf = vec![0u8; 30];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 1, 0, Context(40)) }.unwrap();
    a.ep.tsend(&msg, b_at_a, 1, Context(1)).unwrap();
    let e = err(&b.cq, &[]);
    assert_eq!(e.err, Error::Trunc);
    assert_eq!(
        (e.context, e.flags, e.len, e.olen, e.tag),
        (Context(40), TAGGED_RECV, 30, 70, 1)
    );
    assert_eq!(buf, msg[..30]);
    // Only what fits is pulled.
    assert_eq!(a.far().pulled(), 30);
    assert_eq!((b.cntr_rx.read(), b.cntr_rx.read_err()), (0, 1));
}

const RW: MrAccess = MrAccess::REMOTE_READ.union(MrAccess::REMOTE_WRITE);

fn mr_attr(key: u64) -> MrAttr {
    MrAttr {
        access: RW,
        offset: 0,
        requested_key: key,
        context: 0,
    }
}

#[test]
fn remote_write_lands_in_registered_memory() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0);
    // Two segments: the write crosses from one into the other.
    let mut m1 = [0u8; 64];
    let mut m2 = [0u8; 64];
    let data = pattern(100, 5);
    {
        let mr = b
            .domain
            .mr_regv(vec![&mut m1[..], &mut m2[..]], &mr_attr(0x10))
            .unwrap();
        a.ep.writedata(
            &data,
            0xd1,
            b_at_a,
            mr.remote_addr() + 10,
            mr.key(),
            Context(50),
        )
        .unwrap();
        let e = ok(&a.cq, &[&b.domain]);
        assert_eq!(
            (e.op_context, e.flags),
            (Context(50), CqFlags::RMA | CqFlags::WRITE)
        );
        let e = ok(&b.cq, &[]);
        assert_eq!(
            (e.flags, e.len, e.data),
            (
                CqFlags::RMA | CqFlags::REMOTE_WRITE | CqFlags::REMOTE_CQ_DATA,
                100,
                0xd1
            )
        );
        assert_eq!((a.cntr_tx.read(), b.cntr_rx.read()), (1, 1));
    }
    assert_eq!(&m1[10..], &data[..54]);
    assert_eq!(&m2[..46], &data[54..]);
    assert!(m1[..10].iter().chain(&m2[46..]).all(|&x| x == 0));
    assert_eq!(a.far().pulled(), 100);
}

#[test]
fn remote_read_response_lands_in_the_read_buffers() {
    let (a, b, b_at_a, _) = pair();
    // The target's response data stays with the target.
    b.far().remote_from(0);
    let mut mem = pattern(128, 6);
    let orig = mem.clone();
    let mut x = [0u8; 7];
    let mut y = [0u8; 50];
    {
        let mr = b.domain.mr_reg(&mut mem, &mr_attr(0x20)).unwrap();
        {
            let mut iov: [&mut [u8]; 2] = [&mut x, &mut y];
            // SAFETY: `x`, `y` outlive the read, inspected after its completion.
            unsafe {
                a.ep.readv(
                    &mut iov,
                    b_at_a,
                    mr.remote_addr() + 20,
                    mr.key(),
                    Context(60),
                )
            }
            .unwrap();
        }
        let e = ok(&a.cq, &[&b.domain]);
        assert_eq!(
            (e.op_context, e.flags, e.len),
            (Context(60), CqFlags::RMA | CqFlags::READ, 57)
        );
    }
    assert_eq!(x[..], orig[20..27]);
    assert_eq!(y[..], orig[27..77]);
    assert_eq!(b.far().pulled(), 57);
    assert_eq!((a.cntr_tx.read(), b.cntr_rx.read()), (1, 1));
}

#[test]
fn lost_payload_fails_the_matched_receive_and_the_delivery_ack() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0).fail_at(10);
    let mut buf = vec![0u8; 64];
    // SAFETY: `buf` outlives the receive, read after its completion.
    unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 3, 0, Context(70)) }.unwrap();
    let msg = pattern(40, 7);
    let m = TaggedMsg {
        iov: &[&msg],
        addr: b_at_a,
        tag: 3,
        context: Context(71),
        data: 0,
    };
    a.ep.tsendmsg(&m, OpFlags::DELIVERY_COMPLETE).unwrap();
    let e = err(&b.cq, &[]);
    assert_eq!(e.err, Error::Io);
    assert_eq!(e.prov_errno, Error::Io.code());
    assert_eq!(
        (e.context, e.flags, e.len, e.olen, e.tag, e.buf),
        (Context(70), TAGGED_RECV, 40, 0, 3, buf.as_ptr() as usize)
    );
    assert_eq!(&buf[..10], &msg[..10]);
    assert_eq!((b.cntr_rx.read(), b.cntr_rx.read_err()), (0, 1));
    // The sender learns it through its delivery-complete acknowledgement.
    let e = err(&a.cq, &[&b.domain]);
    assert_eq!((e.err, e.context), (Error::Io, Context(71)));
    assert_eq!((a.cntr_tx.read(), a.cntr_tx.read_err()), (0, 1));
    // Exactly one entry each; the next message is unaffected.
    assert_quiet(&b.cq, &[]);
    assert_quiet(&a.cq, &[&b.domain]);
    a.far().fail_at(usize::MAX);
    // SAFETY: as above.
    unsafe { b.ep.trecv(&mut buf, FiAddr::UNSPEC, 3, 0, Context(72)) }.unwrap();
    a.ep.tsend(&msg, b_at_a, 3, Context(73)).unwrap();
    assert_eq!(ok(&b.cq, &[]).op_context, Context(72));
    assert_eq!(&buf[..40], &msg[..]);
}

#[test]
fn lost_unexpected_payload_fails_the_receive_that_takes_it() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0).fail_at(5);
    a.ep.tsend(&pattern(50, 8), b_at_a, 9, Context(1)).unwrap();
    a.far().fail_at(usize::MAX);
    let good = pattern(50, 9);
    a.ep.tsend(&good, b_at_a, 9, Context(2)).unwrap();
    b.domain.progress();
    assert_eq!(b.far().queued(), 0);
    let mut x = vec![0u8; 64];
    let mut y = vec![0u8; 64];
    // SAFETY: the buffers outlive the receives, read after their completions.
    unsafe { b.ep.trecv(&mut x, FiAddr::UNSPEC, 9, 0, Context(80)) }.unwrap();
    let e = err(&b.cq, &[]);
    assert_eq!(
        (e.err, e.context, e.flags, e.len, e.tag),
        (Error::Io, Context(80), TAGGED_RECV, 50, 9)
    );
    // SAFETY: as above.
    unsafe { b.ep.trecv(&mut y, FiAddr::UNSPEC, 9, 0, Context(81)) }.unwrap();
    let e = ok(&b.cq, &[]);
    assert_eq!((e.op_context, e.len), (Context(81), 50));
    assert_eq!(&y[..50], &good[..]);
    assert_eq!((b.cntr_rx.read(), b.cntr_rx.read_err()), (1, 1));
    assert_quiet(&b.cq, &[]);
}

#[test]
fn lost_payload_in_a_multi_receive_buffer_keeps_the_rest() {
    // Declared first: it stays posted until the endpoint is dropped.
    let mut buf = vec![0u8; 512];
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0);
    {
        let mut iov: [&mut [u8]; 1] = [&mut buf];
        let mut m = MsgMut {
            iov: &mut iov,
            addr: FiAddr::UNSPEC,
            context: Context(90),
        };
        // SAFETY: `buf` outlives the receive; read after the completions.
        unsafe { b.ep.recvmsg(&mut m, OpFlags::MULTI_RECV) }.unwrap();
    }
    let base = buf.as_ptr() as usize;
    // One at a time: a CQ reports a waiting error entry before older successes.
    let good = pattern(100, 1);
    a.ep.send(&good, b_at_a, Context(1)).unwrap();
    let e = ok(&b.cq, &[]);
    assert_eq!((e.len, e.buf), (100, base));
    a.far().fail_at(20);
    a.ep.send(&pattern(100, 2), b_at_a, Context(2)).unwrap();
    let e = err(&b.cq, &[]);
    assert_eq!(
        (e.err, e.context, e.len, e.buf),
        (Error::Io, Context(90), 100, base + 100)
    );
    assert!(!e.flags.contains(CqFlags::MULTI_RECV));
    a.far().fail_at(usize::MAX);
    let last = pattern(100, 3);
    a.ep.send(&last, b_at_a, Context(3)).unwrap();
    let e = ok(&b.cq, &[]);
    assert_eq!((e.len, e.buf), (100, base + 200));
    assert_eq!(&buf[..100], &good[..]);
    assert_eq!(&buf[200..300], &last[..]);
    assert_eq!((b.cntr_rx.read(), b.cntr_rx.read_err()), (2, 1));
}

#[test]
fn peek_claim_of_remote_arrivals() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0);
    let good = pattern(80, 4);
    a.ep.tsend(&good, b_at_a, 1, Context(1)).unwrap();
    a.far().fail_at(0);
    a.ep.tsend(&pattern(80, 5), b_at_a, 2, Context(2)).unwrap();
    b.domain.progress();
    let mut buf = vec![0u8; 80];
    for (tag, ctx) in [(1, Context(100)), (2, Context(101))] {
        let mut iov: [&mut [u8]; 0] = [];
        let mut m = TaggedMsgMut {
            iov: &mut iov,
            addr: FiAddr::UNSPEC,
            tag,
            ignore: 0,
            context: ctx,
        };
        // SAFETY: no buffer.
        unsafe { b.ep.trecvmsg(&mut m, OpFlags::PEEK | OpFlags::CLAIM) }.unwrap();
        let e = ok(&b.cq, &[]);
        assert_eq!((e.op_context, e.len, e.tag), (ctx, 80, tag));
    }
    for (ctx, good_one) in [(Context(100), true), (Context(101), false)] {
        let mut iov: [&mut [u8]; 1] = [&mut buf];
        let mut m = TaggedMsgMut {
            iov: &mut iov,
            addr: FiAddr::UNSPEC,
            tag: 0,
            ignore: 0,
            context: ctx,
        };
        // SAFETY: `buf` outlives the receive, read after its completion.
        unsafe { b.ep.trecvmsg(&mut m, OpFlags::CLAIM) }.unwrap();
        match next(&b.cq, &[]) {
            Ok(e) if good_one => {
                assert_eq!((e.op_context, e.len), (ctx, 80));
                assert_eq!(buf, good);
            }
            Err(e) if !good_one => assert_eq!((e.err, e.context), (Error::Io, ctx)),
            other => panic!("claim of {ctx:?}: {other:?}"),
        }
    }
}

#[test]
fn lost_write_payload_answers_eio() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0).fail_at(3);
    let mut mem = vec![0u8; 64];
    {
        let mr = b.domain.mr_reg(&mut mem, &mr_attr(0x30)).unwrap();
        a.ep.writedata(
            &pattern(32, 1),
            5,
            b_at_a,
            mr.remote_addr(),
            mr.key(),
            Context(110),
        )
        .unwrap();
        let e = err(&a.cq, &[&b.domain]);
        assert_eq!(
            (e.err, e.context, e.flags),
            (Error::Io, Context(110), CqFlags::RMA | CqFlags::WRITE)
        );
        assert_eq!((a.cntr_tx.read(), a.cntr_tx.read_err()), (0, 1));
        // Nothing reported or counted at the target.
        assert_quiet(&b.cq, &[]);
        assert_eq!(b.cntr_rx.read(), 0);
    }
    assert!(mem[3..].iter().all(|&x| x == 0));
}

#[test]
fn lost_read_response_completes_the_read_with_eio() {
    let (a, b, b_at_a, _) = pair();
    b.far().remote_from(0).fail_at(8);
    let mut mem = pattern(64, 2);
    let mut buf = [0u8; 32];
    {
        let mr = b.domain.mr_reg(&mut mem, &mr_attr(0x40)).unwrap();
        // SAFETY: `buf` outlives the read.
        unsafe {
            a.ep.read(&mut buf, b_at_a, mr.remote_addr(), mr.key(), Context(120))
        }
        .unwrap();
        let e = err(&a.cq, &[&b.domain]);
        assert_eq!(
            (e.err, e.context, e.flags),
            (Error::Io, Context(120), CqFlags::RMA | CqFlags::READ)
        );
        assert_eq!((a.cntr_tx.read(), a.cntr_tx.read_err()), (0, 1));
        assert_quiet(&a.cq, &[&b.domain]);
    }
}

#[test]
fn remote_atomic_operands_are_refused_with_eio() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0);
    a.far().remote_atomics.store(true, Ordering::Relaxed);
    let mut mem = vec![0u8; 16];
    let mut old = [0xffu8; 8];
    {
        let mr = b.domain.mr_reg(&mut mem, &mr_attr(0x50)).unwrap();
        let (addr, key) = (mr.remote_addr(), mr.key());
        let one = 1u64.to_le_bytes();
        a.ep.atomic(
            &one,
            Datatype::Uint64,
            AtomicOp::Sum,
            b_at_a,
            addr,
            key,
            Context(130),
        )
        .unwrap();
        let e = err(&a.cq, &[&b.domain]);
        assert_eq!(
            (e.err, e.context, e.flags),
            (Error::Io, Context(130), CqFlags::ATOMIC | CqFlags::WRITE)
        );
        // SAFETY: `old` outlives the operation.
        unsafe {
            a.ep.fetch_atomic(
                &one,
                &mut old,
                Datatype::Uint64,
                AtomicOp::Sum,
                b_at_a,
                addr,
                key,
                Context(131),
            )
        }
        .unwrap();
        let e = err(&a.cq, &[&b.domain]);
        assert_eq!(
            (e.err, e.context, e.flags),
            (Error::Io, Context(131), CqFlags::ATOMIC | CqFlags::READ)
        );
        // Inline operands (what transports send) still work.
        a.far().remote_atomics.store(false, Ordering::Relaxed);
        a.ep.atomic(
            &one,
            Datatype::Uint64,
            AtomicOp::Sum,
            b_at_a,
            addr,
            key,
            Context(132),
        )
        .unwrap();
        assert_eq!(ok(&a.cq, &[&b.domain]).op_context, Context(132));
    }
    assert_eq!(old, [0xff; 8]);
    assert_eq!(mem[..8], 1u64.to_le_bytes());
}

#[test]
fn responses_of_the_wrong_kind_fail_the_operation() {
    let (a, b, b_at_a, _) = pair();
    let mut mem = pattern(64, 3);
    let mut buf = [0u8; 16];
    let mr = b.domain.mr_reg(&mut mem, &mr_attr(0x60)).unwrap();
    // SAFETY: `buf` outlives the read.
    unsafe {
        a.ep.read(&mut buf, b_at_a, mr.remote_addr(), mr.key(), Context(140))
    }
    .unwrap();
    // Intercept the request and answer it with a bare `Ack` (no data) instead.
    let req = b.far().inbox.q().pop_front().unwrap();
    assert_eq!(req.hdr.op, Op::ReadReq as u8);
    let forged = Header {
        op: Op::Ack as u8,
        tx_idx: req.hdr.tx_idx,
        req: req.hdr.req,
        ..Header::default()
    };
    a.far()
        .inject(forged, b.far().name, Body::Inline(Vec::new()));
    let e = err(&a.cq, &[]);
    assert_eq!((e.err, e.context), (Error::Io, Context(140)));
    // A second (replayed) answer finds nothing pending.
    a.far()
        .inject(forged, b.far().name, Body::Inline(Vec::new()));
    assert_quiet(&a.cq, &[]);
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    fn header() -> impl Strategy<Value = Header> {
        (
            (0u8..=9, any::<u8>(), any::<u8>(), any::<u8>()),
            (
                prop_oneof![Just(0u16), Just(1), any::<u16>()],
                prop_oneof![Just(0u16), any::<u16>()],
            ),
            (
                any::<u32>(),
                prop_oneof![Just(0u32), 1u32..=64, any::<u32>()],
            ),
            // Request ids: forged near the live ones (generation 1, low slots) or random.
            prop_oneof![
                (1u64..3, 0u64..4).prop_map(|(g, i)| (g << 32) | i),
                any::<u64>()
            ],
            (prop_oneof![Just(0u64), Just(7), any::<u64>()], any::<u64>()),
            // Addresses near the registered region, or anywhere.
            prop_oneof![0u64..160, any::<u64>()],
            prop_oneof![Just(0x70u64), any::<u64>()],
            prop_oneof![0u64..200, any::<u64>()],
        )
            .prop_map(
                |(
                    (op, flags, atomic_op, datatype),
                    (rx_idx, tx_idx),
                    (status, aux),
                    req,
                    (tag, data),
                    addr,
                    key,
                    len,
                )| Header {
                    op,
                    flags,
                    atomic_op,
                    datatype,
                    rx_idx,
                    tx_idx,
                    status,
                    aux,
                    req,
                    tag,
                    data,
                    addr,
                    key,
                    len,
                },
            )
    }

    #[derive(Debug, Clone)]
    enum Shape {
        Inline,
        /// Remote, failing past this offset.
        Remote(usize),
    }

    fn packet() -> impl Strategy<Value = (Header, Vec<u8>, Shape, bool)> {
        (
            header(),
            proptest::collection::vec(any::<u8>(), 0..96),
            prop_oneof![Just(Shape::Inline), (0usize..128).prop_map(Shape::Remote)],
            // Whether `len` agrees with the payload (what a sane transport ensures).
            any::<bool>(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Arbitrary packets from a peer (any op, index, id, status, length, address,
        /// key; inline or remote payloads that may fail) never panic the handlers and
        /// never touch memory outside what was registered or posted; afterwards the
        /// endpoints still work.
        #[test]
        fn arbitrary_packets_are_harmless(pkts in proptest::collection::vec(packet(), 1..24)) {
            // Declared before the endpoints, which may keep them posted until dropped.
            let mut mem = [0xa5u8; 160];
            let mut rbuf = vec![0u8; 64];
            let mut multi = vec![0u8; 256];
            let mut rd = [0u8; 8];
            let mut buf = [0u8; 4];
            let (a, b, b_at_a, _) = pair();
            // Registered: mem[16..144] of b, key 0x70.
            let (lo, mid) = mem.split_at_mut(16);
            let (mid, hi) = mid.split_at_mut(128);
            let mr = b.domain.mr_reg(mid, &mr_attr(0x70)).unwrap();
            // SAFETY: the buffers outlive both endpoints' use of them (the endpoints
            // are dropped before the buffers at the end of the case).
            unsafe { b.ep.trecv(&mut rbuf, FiAddr::UNSPEC, 0, u64::MAX, Context(1)) }.unwrap();
            {
                let mut iov: [&mut [u8]; 1] = [&mut multi];
                let mut m = MsgMut { iov: &mut iov, addr: FiAddr::UNSPEC, context: Context(2) };
                // SAFETY: as above.
                unsafe { b.ep.recvmsg(&mut m, OpFlags::MULTI_RECV) }.unwrap();
            }
            // Something pending at `a`, for forged responses to find.
            // SAFETY: as above.
            unsafe { a.ep.read(&mut rd, b_at_a, mr.remote_addr(), mr.key(), Context(3)) }.unwrap();
            let srcs = [a.far().name, [0xee; 8]];
            for (i, (mut hdr, bytes, shape, agree)) in pkts.into_iter().enumerate() {
                if agree {
                    hdr.len = bytes.len() as u64;
                }
                let body = match shape {
                    Shape::Inline => Body::Inline(bytes),
                    Shape::Remote(fail_at) => Body::Remote(VecPull {
                        data: bytes,
                        fail_at,
                        pulled: Arc::new(AtomicUsize::new(0)),
                    }),
                };
                // Half to `b` (requests), half to `a` (forged responses and requests).
                let (to, src) = if i % 2 == 0 { (b.far(), srcs[i / 2 % 2]) } else { (a.far(), b.far().name) };
                to.inject(hdr, src, body);
                b.domain.progress();
                a.domain.progress();
            }
            for _ in 0..4 {
                b.domain.progress();
                a.domain.progress();
            }
            // Drain whatever was reported, errors included.
            let mut e = [CqTaggedEntry::default(); 8];
            for cq in [&a.cq, &b.cq] {
                loop {
                    match cq.read(&mut e) {
                        Ok(_) => {}
                        Err(Error::Avail) => { cq.read_err().unwrap(); }
                        Err(_) => break,
                    }
                }
            }
            // The endpoints still talk.
            // SAFETY: `buf` outlives the receive.
            unsafe { a.ep.trecv(&mut buf, FiAddr::UNSPEC, 0x5eed, 0, Context(9)) }.unwrap();
            let a_at_b = b.av.insert(&a.ep.name()).unwrap();
            b.ep.tsend(b"okay", a_at_b, 0x5eed, Context(10)).unwrap();
            let e = ok(&a.cq, &[&b.domain]);
            prop_assert_eq!(e.op_context, Context(9));
            prop_assert_eq!(&buf, b"okay");
            drop(mr);
            prop_assert!(lo.iter().chain(hi.iter()).all(|&x| x == 0xa5));
            drop((a, b));
        }
    }
}

/// Atomic requests a peer forged past what a real initiator sends are answered with
/// the error the target's checks give, in their order: a length over the limit
/// (`FI_EMSGSIZE`, on the long-vector path), a compare payload of the wrong size
/// (`FI_EINVAL`); memory stays untouched.
#[test]
fn forged_atomic_requests_are_answered_with_errors() {
    let (a, b, b_at_a, _) = pair();
    let mut mem = pattern(64, 9);
    let orig = mem.clone();
    let mut old = [0u8; 8];
    {
        let mr = b.domain.mr_reg(&mut mem, &mr_attr(0x90)).unwrap();
        let one = 1u64.to_le_bytes();
        for (i, (aux, flags, want)) in [
            (crate::limits::MAX_ATOMIC_SIZE as u32 + 8, 0, Error::MsgSize),
            (u32::MAX, 0, Error::MsgSize),
            (8, crate::provider::wire::HDR_COMPARE, Error::Inval),
        ]
        .into_iter()
        .enumerate()
        {
            let ctx = Context(150 + i);
            // SAFETY: `old` outlives the operation.
            unsafe {
                a.ep.fetch_atomic(
                    &one,
                    &mut old,
                    Datatype::Uint64,
                    AtomicOp::Sum,
                    b_at_a,
                    mr.remote_addr(),
                    mr.key(),
                    ctx,
                )
            }
            .unwrap();
            let mut req = b.far().inbox.q().pop_front().unwrap();
            assert_eq!(req.hdr.op, Op::Atomic as u8);
            req.hdr.aux = aux;
            req.hdr.flags |= flags;
            b.far().inject(req.hdr, a.far().name, req.body);
            let e = err(&a.cq, &[&b.domain]);
            assert_eq!((e.err, e.context), (want, ctx), "aux {aux} flags {flags}");
        }
    }
    assert_eq!(mem, orig);
    assert_eq!(old, [0; 8], "no result of a failed fetch");
}

/// Posts through the one-segment atomic entry of `class` a `u64` atomic taking the
/// target from 7 to 8: `FI_SUM` of 1 (base, fetch) or `FI_CSWAP` of 8 where 7 is
/// (compare), the old value going to `old` (fetch, compare).
///
/// # Safety
/// `old` must outlive the operation (as `fetch_atomicmsg` requires).
unsafe fn seven_to_eight(
    ep: &Endpoint<Net>,
    class: AtomicClass,
    m: &AtomicMsg<'_>,
    old: &mut [u8; 8],
    flags: OpFlags,
) -> Result<()> {
    let (one, eight, seven) = (1u64.to_le_bytes(), 8u64.to_le_bytes(), 7u64.to_le_bytes());
    match class {
        AtomicClass::Base => ep.atomicmsg(
            &AtomicMsg {
                operand: &one,
                ..*m
            },
            flags,
        ),
        // SAFETY: forwarded contract.
        AtomicClass::Fetch => unsafe {
            ep.fetch_atomicmsg(
                &AtomicMsg {
                    operand: &one,
                    ..*m
                },
                old,
                flags,
            )
        },
        // SAFETY: forwarded contract.
        AtomicClass::Compare => unsafe {
            let m = AtomicMsg {
                operand: &eight,
                op: AtomicOp::Cswap,
                ..*m
            };
            ep.compare_atomicmsg(&m, &seven, old, flags)
        },
    }
}

/// Each one-segment atomic entry's direct path (base, fetch, compare) hands every
/// case it does not take to the generic one, which answers as before: a disabled
/// endpoint, and a fence behind an operation in flight (queued, sent once the
/// operation completed), with the kind's completion flags and result.
#[test]
fn atomic_entries_fall_back_to_the_generic_path() {
    let info = Far::candidates().remove(0);
    let fabric = Fabric::<Net>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let idle = domain.endpoint(&info).unwrap();
    for class in AtomicClass::ALL {
        let mut old = [0u8; 8];
        let mut buf = [0u8; 8];
        let m = AtomicMsg {
            operand: &[],
            addr: FiAddr(0),
            remote_addr: 0,
            key: 1,
            datatype: Datatype::Uint64,
            op: AtomicOp::Sum,
            context: Context(160),
            data: 0,
        };
        // SAFETY: the call fails; nothing is recorded.
        let r = unsafe { seven_to_eight(&idle, class, &m, &mut old, OpFlags::empty()) };
        assert_eq!(r, Err(Error::OpBadState), "{class:?}");

        let (a, b, b_at_a, _) = pair();
        let mut mem = 7u64.to_le_bytes().to_vec();
        {
            let mr = b.domain.mr_reg(&mut mem, &mr_attr(0x91)).unwrap();
            let (addr, key) = (mr.remote_addr(), mr.key());
            // SAFETY: `buf` outlives the read.
            unsafe { a.ep.read(&mut buf, b_at_a, addr, key, Context(161)) }.unwrap();
            let m = AtomicMsg {
                addr: b_at_a,
                remote_addr: addr,
                key,
                context: Context(162),
                ..m
            };
            // SAFETY: `old` outlives the operation.
            unsafe { seven_to_eight(&a.ep, class, &m, &mut old, OpFlags::FENCE) }.unwrap();
            assert_eq!(
                b.far().inbox.q().len(),
                1,
                "the fenced {class:?} atomic waits"
            );
            assert_eq!(ok(&a.cq, &[&b.domain]).op_context, Context(161));
            let e = ok(&a.cq, &[&b.domain]);
            let kind = if class == AtomicClass::Base {
                CqFlags::WRITE
            } else {
                CqFlags::READ
            };
            assert_eq!(
                (e.op_context, e.flags),
                (Context(162), CqFlags::ATOMIC | kind)
            );
        }
        let fetched = if class == AtomicClass::Base { 0u64 } else { 7 };
        assert_eq!((buf, old), (7u64.to_le_bytes(), fetched.to_le_bytes()));
        assert_eq!(mem, 8u64.to_le_bytes(), "{class:?}");
    }
}

/// A refused response is the transport's bug: asserted in debug builds, never dropped
/// in silence.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "refused a response")]
fn a_refused_response_is_asserted() {
    let (a, b, b_at_a, _) = pair();
    b.far().refuse_responses.store(true, Ordering::Relaxed);
    let mut m = [0u8; 8];
    let mr = b.domain.mr_reg(&mut m[..], &mr_attr(0x11)).unwrap();
    a.ep.write(&[1; 8], b_at_a, mr.remote_addr(), mr.key(), Context(1))
        .unwrap();
    b.domain.progress();
}

/// In release builds the refusal reaches the target endpoint's EQ as an error event.
#[test]
#[cfg(not(debug_assertions))]
fn a_refused_response_is_reported_on_the_eq() {
    let (a, b, b_at_a, _) = pair();
    let eq = b.domain.eq(&EqAttr::default()).unwrap();
    b.ep.bind_eq(&eq).unwrap();
    b.far().refuse_responses.store(true, Ordering::Relaxed);
    let mut m = [0u8; 8];
    let mr = b.domain.mr_reg(&mut m[..], &mr_attr(0x11)).unwrap();
    a.ep.write(&[1; 8], b_at_a, mr.remote_addr(), mr.key(), Context(1))
        .unwrap();
    b.domain.progress();
    let e = eq.read_err(false).unwrap();
    assert_eq!(e.err, Error::Io);
    assert_eq!(e.prov_errno, Error::Again.code());
}

/// Unexpected payloads are buffered up to `UNEXPECTED_BYTES`; later arrivals wait in
/// the transport (the sender keeps them), and every one is received once receives are
/// posted.
#[test]
fn unexpected_bytes_are_bounded_and_the_rest_waits_in_the_transport() {
    let (a, b, b_at_a, _) = pair();
    a.far().remote_from(0);
    const N: usize = 80;
    const LEN: usize = 1 << 20;
    for i in 0..N {
        a.ep.tsend(&pattern(LEN, i as u8), b_at_a, i as u64, Context(i))
            .unwrap();
        ok(&a.cq, &[]);
    }
    for _ in 0..10 {
        b.domain.progress();
    }
    let held = b.ep.ep().rx[0].state.with(|st| st.pool.held());
    assert!(held <= super::UNEXPECTED_BYTES, "held {held}");
    assert_eq!(held, super::UNEXPECTED_BYTES / LEN * LEN);
    assert_eq!(
        b.far().queued(),
        N - held / LEN,
        "the rest waits in the transport"
    );
    let mut buf = vec![0u8; LEN];
    for i in 0..N {
        // SAFETY: `buf` is read only after this receive's completion.
        unsafe {
            b.ep.trecv(&mut buf, FiAddr::UNSPEC, i as u64, 0, Context(1))
        }
        .unwrap();
        let e = ok(&b.cq, &[]);
        assert_eq!((e.tag, e.len), (i as u64, LEN));
        assert!(buf == pattern(LEN, i as u8), "message {i}");
    }
    assert_eq!(b.ep.ep().rx[0].state.with(|st| st.pool.held()), 0);
}
