// The connection management conformance suite, written once for any provider with MSG
// endpoints: connection management (`fi_cm`, `fi_eq`, `fi_endpoint`: passive endpoints,
// connect/accept/reject/shutdown, EQ events and error entries) and the data path of
// connected MSG endpoints, for a matrix of static stacks (the run-time layer has no MSG
// endpoint).
//
// Not a test crate of its own: a test crate includes it at its root after naming the
// provider under test, e.g. `tests/conformance_cm.rs` (loopback):
//
//     type Prov = fabric_loopback::Loopback;
//     include!("suite/cm.rs");
//
// Limits come from the provider (its connection manager's `CM_DATA_SIZE`), never from
// constants of one provider. Being included, this file has no inner attributes or `//!`
// docs: the including crate carries them.
//
// Every wait is bounded (`DEADLINE`) and drives progress on both sides, so a broken
// implementation fails instead of hanging.

use std::time::{Duration, Instant};

use fabric::atomic::{AtomicOp, Datatype};
use fabric::attr::{CqAttr, EpType, EqAttr, MrAttr};
use fabric::flags::{BindFlags, Caps, CqFlags, MrAccess};
use fabric::{
    getinfo, Config, Context, Cq, CqTagged, CqTaggedEntry, Domain, Endpoint, EpOpt, EpOptName,
    EqEntry, EqErrEntry, EqEvent, Error, EventQueue, Fabric, FiAddr, Hints, Info, PassiveEndpoint,
};
use fabric::provider::{ConnectionManager, Transport};
use fabric::Provider;

const DEADLINE: Duration = Duration::from_secs(5);

/// The most connection data the provider under test carries (`FI_OPT_CM_DATA_SIZE`).
const CM_DATA_SIZE: usize = <<<Prov as Provider>::Transport as Transport>::Cm as ConnectionManager<
    <Prov as Provider>::Transport,
>>::CM_DATA_SIZE;

/// The caps an MSG info is asked with: everything but what needs an AV.
const MSG_CAPS: Caps = Caps::MSG
    .union(Caps::TAGGED)
    .union(Caps::RMA)
    .union(Caps::ATOMIC);

fn msg_info<S: Config>() -> Info {
    let hints = Hints::new().caps(MSG_CAPS).ep_type(EpType::Msg);
    let mut infos = getinfo::<S>(Some(&hints)).expect("getinfo(MSG)");
    let info = infos.remove(0);
    assert_eq!(info.ep_attr.ep_type, EpType::Msg);
    info
}

/// A fabric with a domain and an EQ: what each side of a connection opens first.
struct Host<S: Config> {
    fabric: Fabric<S>,
    domain: Domain<S>,
    eq: EventQueue<S>,
}

fn host<S: Config>(info: &Info) -> Host<S> {
    let fabric = Fabric::<S>::open(info).expect("fi_fabric");
    let domain = fabric.domain(info).expect("fi_domain");
    let eq = fabric.eq(&EqAttr::default()).expect("fi_eq_open");
    Host { fabric, domain, eq }
}

/// A listening passive endpoint on its own host.
struct Listener<S: Config> {
    host: Host<S>,
    pep: PassiveEndpoint<S>,
}

fn listener<S: Config>() -> Listener<S> {
    let info = msg_info::<S>();
    let host = host::<S>(&info);
    let pep = host.fabric.passive_ep(&info).expect("fi_passive_ep");
    pep.bind_eq(&host.eq).expect("fi_pep_bind");
    pep.listen().expect("fi_listen");
    Listener { host, pep }
}

/// An MSG endpoint with its CQ and EQ bound, enabled, not connected.
struct Side<S: Config> {
    host: Host<S>,
    cq: Cq<S>,
    ep: Endpoint<S>,
}

fn side<S: Config>(host: Host<S>, info: &Info) -> Side<S> {
    let cq = host.domain.cq(&CqAttr::default()).expect("fi_cq_open");
    let ep = host.domain.endpoint(info).expect("fi_endpoint(MSG)");
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .expect("bind cq");
    ep.bind_eq(&host.eq).expect("bind eq");
    ep.enable().expect("fi_enable");
    Side { host, cq, ep }
}

/// Reads `eq` until an event or an error event, progressing `domains` meanwhile.
fn wait_eq<S: Config>(eq: &EventQueue<S>, domains: &[&Domain<S>]) -> Result<EqEntry, EqErrEntry> {
    let end = Instant::now() + DEADLINE;
    loop {
        match eq.read(false) {
            Ok(e) => return Ok(e),
            Err(Error::Avail) => return Err(eq.read_err(false).expect("readerr after Avail")),
            Err(Error::Again) => {}
            Err(e) => panic!("fi_eq_read: {e}"),
        }
        for d in domains {
            d.progress();
        }
        assert!(Instant::now() < end, "no EQ event within {DEADLINE:?}");
        std::thread::yield_now();
    }
}

#[track_caller]
fn expect_event<S: Config>(eq: &EventQueue<S>, domains: &[&Domain<S>], want: EqEvent) -> EqEntry {
    match wait_eq(eq, domains) {
        Ok(e) => {
            assert_eq!(e.event, want, "{e:?}");
            e
        }
        Err(e) => panic!("expected {want:?}, got error event {e:?}"),
    }
}

#[track_caller]
fn expect_err<S: Config>(eq: &EventQueue<S>, domains: &[&Domain<S>]) -> EqErrEntry {
    match wait_eq(eq, domains) {
        Ok(e) => panic!("expected an error event, got {e:?}"),
        Err(e) => e,
    }
}

/// Reads `eq` for a while and asserts nothing comes.
#[track_caller]
fn assert_eq_quiet<S: Config>(eq: &EventQueue<S>) {
    for _ in 0..100 {
        assert_eq!(eq.read(true), Err(Error::Again));
    }
}

/// The request a listener reports: its info (with the handle) and connection data.
fn conn_req<S: Config>(l: &Listener<S>, others: &[&Domain<S>]) -> (Info, Vec<u8>) {
    let e = expect_event(&l.host.eq, others, EqEvent::ConnReq);
    let info = *e.conn.expect("FI_CONNREQ carries an info");
    assert!(info.handle.is_some(), "the info names the request");
    assert_eq!(info.ep_attr.ep_type, EpType::Msg);
    (info, e.info.unwrap_or_default())
}

/// A connected pair: `(client, server)`, with the data each side's `FI_CONNECTED`
/// carried checked.
fn connected<S: Config>() -> (Side<S>, Side<S>) {
    let l = listener::<S>();
    let info = msg_info::<S>();
    let c = side::<S>(host(&info), &info);
    c.ep.connect(&l.pep.name(), b"hello").expect("fi_connect");
    let (sinfo, data) = conn_req(&l, &[&c.host.domain]);
    assert_eq!(data, b"hello");
    assert_eq!(sinfo.dest_addr.as_deref(), Some(&c.ep.name()[..]));
    let s = side::<S>(host(&sinfo), &sinfo);
    s.ep.accept(b"welcome").expect("fi_accept");
    let e = expect_event(&c.host.eq, &[&s.host.domain], EqEvent::Connected);
    assert_eq!(e.info.as_deref(), Some(&b"welcome"[..]));
    expect_event(&s.host.eq, &[&c.host.domain], EqEvent::Connected);
    (c, s)
}

fn wait_cq<S: Config<Cq = CqTagged>>(
    cq: &Cq<S>,
    others: &[&Domain<S>],
) -> Result<CqTaggedEntry, fabric::CqErrEntry> {
    let end = Instant::now() + DEADLINE;
    loop {
        let mut e = [CqTaggedEntry::default(); 1];
        match cq.read(&mut e) {
            Ok(1) => return Ok(e[0]),
            Ok(n) => panic!("read returned {n}"),
            Err(Error::Avail) => return Err(cq.read_err().expect("cq readerr")),
            Err(Error::Again) => {}
            Err(e) => panic!("fi_cq_read: {e}"),
        }
        for d in others {
            d.progress();
        }
        assert!(Instant::now() < end, "no completion within {DEADLINE:?}");
        std::thread::yield_now();
    }
}

#[track_caller]
fn wait_ok<S: Config<Cq = CqTagged>>(cq: &Cq<S>, others: &[&Domain<S>]) -> CqTaggedEntry {
    wait_cq(cq, others).unwrap_or_else(|e| panic!("error completion {e:?}"))
}

// ---------------------------------------------------------------------------------------
// Connection management
// ---------------------------------------------------------------------------------------

/// Connect and accept carry connection data both ways; both sides see FI_CONNECTED
/// and know their peer.
fn connect_accept<S: Config<Cq = CqTagged>>() {
    let (c, s) = connected::<S>();
    assert_eq!(c.ep.peer().unwrap(), s.ep.name());
    assert_eq!(s.ep.peer().unwrap(), c.ep.name());
    // Connected once: neither side connects or accepts again.
    assert_eq!(c.ep.connect(&s.ep.name(), &[]), Err(Error::IsConn));
    assert_eq!(s.ep.accept(&[]), Err(Error::IsConn));
    assert_eq_quiet(&c.host.eq);
    assert_eq_quiet(&s.host.eq);
}

/// getpeer fails before FI_CONNECTED is read and after the connection went; the
/// option reports the connection data size.
fn getpeer_and_cm_data_size<S: Config<Cq = CqTagged>>() {
    let l = listener::<S>();
    let info = msg_info::<S>();
    let c = side::<S>(host(&info), &info);
    assert_eq!(c.ep.peer(), Err(Error::NotConn));
    assert_eq!(
        c.ep.getopt(EpOptName::CmDataSize),
        Ok(EpOpt::CmDataSize(CM_DATA_SIZE))
    );
    c.ep.connect(&l.pep.name(), &[]).unwrap();
    assert_eq!(
        c.ep.peer(),
        Err(Error::NotConn),
        "connecting is not connected"
    );
    let (sinfo, data) = conn_req(&l, &[]);
    assert!(data.is_empty());
    let s = side::<S>(host(&sinfo), &sinfo);
    s.ep.accept(&[]).unwrap();
    expect_event(&c.host.eq, &[], EqEvent::Connected);
    assert_eq!(c.ep.peer().unwrap(), s.ep.name());
    expect_event(&s.host.eq, &[], EqEvent::Connected);
    c.ep.shutdown().unwrap();
    assert_eq!(c.ep.peer(), Err(Error::NotConn));
    expect_event(&s.host.eq, &[], EqEvent::Shutdown);
    assert_eq!(s.ep.peer(), Err(Error::NotConn));
    // An RDM endpoint has no connection at all.
    let rdm = getinfo::<S>(Some(&Hints::new().ep_type(EpType::Rdm))).unwrap();
    let h = host::<S>(&rdm[0]);
    let ep = h.domain.endpoint(&rdm[0]).unwrap();
    assert_eq!(ep.getopt(EpOptName::CmDataSize), Ok(EpOpt::CmDataSize(0)));
    assert_eq!(ep.peer(), Err(Error::OpNotSupp));
    assert_eq!(ep.connect(&l.pep.name(), &[]), Err(Error::OpNotSupp));
}

/// A rejected request: FI_ECONNREFUSED with the reject's data in err_data; the handle
/// cannot be accepted afterwards, nor rejected twice.
fn reject_with_data<S: Config<Cq = CqTagged>>() {
    let l = listener::<S>();
    let info = msg_info::<S>();
    let c = side::<S>(host(&info), &info);
    c.ep.connect(&l.pep.name(), b"may I?").unwrap();
    let (sinfo, data) = conn_req(&l, &[]);
    assert_eq!(data, b"may I?");
    let h = sinfo.handle.clone().unwrap();
    l.pep.reject(&h, b"no, busy").unwrap();
    let e = expect_err(&c.host.eq, &[]);
    assert_eq!(e.err, Error::ConnRefused);
    assert_eq!(e.prov_errno, Error::ConnRefused.code());
    assert_eq!(e.err_data, b"no, busy");
    // Read once: gone.
    assert_eq!(c.host.eq.read_err(false), Err(Error::Again));
    assert_eq!(l.pep.reject(&h, &[]), Err(Error::Inval), "rejected twice");
    let s = side::<S>(host(&sinfo), &sinfo);
    assert_eq!(s.ep.accept(&[]), Err(Error::Inval), "accept after reject");
    assert_eq!(c.ep.peer(), Err(Error::NotConn));
    // A refused endpoint does not connect again.
    assert_eq!(c.ep.connect(&l.pep.name(), &[]), Err(Error::OpBadState));
}

/// A connect to a name nobody listens at is refused, with no data.
fn connect_to_nothing<S: Config<Cq = CqTagged>>() {
    let info = msg_info::<S>();
    let c = side::<S>(host(&info), &info);
    // A name no listener has: a fresh passive endpoint that never listens.
    let h = host::<S>(&info);
    let quiet = h.fabric.passive_ep(&info).unwrap();
    c.ep.connect(&quiet.name(), b"anyone?").unwrap();
    let e = expect_err(&c.host.eq, &[]);
    assert_eq!(e.err, Error::ConnRefused);
    assert!(e.err_data.is_empty());
    // A malformed address is refused at once.
    let info2 = msg_info::<S>();
    let c2 = side::<S>(host(&info2), &info2);
    assert_eq!(c2.ep.connect(b"short", &[]), Err(Error::Inval));
}

/// Connection data over FI_OPT_CM_DATA_SIZE is refused with Inval by connect, accept
/// and reject; exactly the limit is carried.
fn cm_data_over_limit<S: Config<Cq = CqTagged>>() {
    let max = CM_DATA_SIZE;
    assert!(max > 0, "a provider with MSG endpoints carries connection data");
    let l = listener::<S>();
    let info = msg_info::<S>();
    let c = side::<S>(host(&info), &info);
    let big = vec![7u8; max + 1];
    assert_eq!(c.ep.connect(&l.pep.name(), &big), Err(Error::Inval));
    c.ep.connect(&l.pep.name(), &big[..max]).unwrap();
    let (sinfo, data) = conn_req(&l, &[]);
    assert_eq!(data.len(), max);
    let h = sinfo.handle.clone().unwrap();
    assert_eq!(l.pep.reject(&h, &big), Err(Error::Inval));
    let s = side::<S>(host(&sinfo), &sinfo);
    assert_eq!(s.ep.accept(&big), Err(Error::Inval));
    // The refused calls answered nothing: the request is still open.
    s.ep.accept(&big[..max]).unwrap();
    let e = expect_event(&c.host.eq, &[], EqEvent::Connected);
    assert_eq!(e.info.map(|d| d.len()), Some(max));
}

/// A request accepted twice: the second endpoint is refused, the first connected.
fn double_accept<S: Config<Cq = CqTagged>>() {
    let l = listener::<S>();
    let info = msg_info::<S>();
    let c = side::<S>(host(&info), &info);
    c.ep.connect(&l.pep.name(), &[]).unwrap();
    let (sinfo, _) = conn_req(&l, &[]);
    let s = side::<S>(host(&sinfo), &sinfo);
    let s2 = side::<S>(host(&sinfo), &sinfo);
    s.ep.accept(b"1").unwrap();
    assert_eq!(s2.ep.accept(b"2"), Err(Error::Inval));
    assert_eq!(s.ep.accept(b"1"), Err(Error::Already));
    let e = expect_event(&c.host.eq, &[], EqEvent::Connected);
    assert_eq!(e.info.as_deref(), Some(&b"1"[..]));
    expect_event(&s.host.eq, &[], EqEvent::Connected);
    assert_eq_quiet(&s2.host.eq);
    // An endpoint opened from an info without a request has nothing to accept.
    let plain = side::<S>(host(&info), &info);
    assert_eq!(plain.ep.accept(&[]), Err(Error::Inval));
}

/// Shutdown by the client: the server sees FI_SHUTDOWN; both sides' later sends fail.
fn shutdown_by_client<S: Config<Cq = CqTagged>>() {
    shutdown_by::<S>(true)
}

/// Shutdown by the server.
fn shutdown_by_server<S: Config<Cq = CqTagged>>() {
    shutdown_by::<S>(false)
}

fn shutdown_by<S: Config<Cq = CqTagged>>(client: bool) {
    let (c, s) = connected::<S>();
    let (me, peer) = if client { (&c, &s) } else { (&s, &c) };
    // A message sent before the shutdown still arrives.
    let mut buf = [0u8; 8];
    // SAFETY: buf outlives the receive, which completes below.
    unsafe { peer.ep.recv(&mut buf, FiAddr::UNSPEC, Context(1)).unwrap() };
    me.ep.send(b"last one", FiAddr::UNSPEC, Context(2)).unwrap();
    wait_ok(&me.cq, &[&peer.host.domain]);
    me.ep.shutdown().unwrap();
    assert_eq!(me.ep.shutdown(), Err(Error::NotConn));
    expect_event(&peer.host.eq, &[&me.host.domain], EqEvent::Shutdown);
    let e = wait_ok(&peer.cq, &[]);
    assert_eq!(e.op_context, Context(1));
    assert_eq!(&buf, b"last one");
    assert!(me.ep.send(b"x", FiAddr::UNSPEC, Context(3)).is_err());
    assert!(peer.ep.send(b"x", FiAddr::UNSPEC, Context(4)).is_err());
    assert_eq_quiet(&me.host.eq);
}

/// Dropping one side of a live connection: the other sees FI_SHUTDOWN, its posted
/// receive completes in error, later sends fail.
fn drop_mid_connection<S: Config<Cq = CqTagged>>() {
    let (c, s) = connected::<S>();
    let mut buf = [0u8; 8];
    // SAFETY: buf outlives the receive, which completes (in error) below.
    unsafe { s.ep.recv(&mut buf, FiAddr::UNSPEC, Context(9)).unwrap() };
    drop(c);
    expect_event(&s.host.eq, &[], EqEvent::Shutdown);
    let e = wait_cq(&s.cq, &[]).expect_err("the receive fails");
    assert_eq!(e.context, Context(9));
    assert_eq!(e.err, Error::ConnReset);
    assert!(e.flags.contains(CqFlags::RECV));
    assert!(s.ep.send(b"x", FiAddr::UNSPEC, Context(1)).is_err());
    assert_eq!(s.ep.peer(), Err(Error::NotConn));
}

/// A connecting endpoint dropped before the accept: the accept fails, nothing hangs.
fn drop_before_accept<S: Config<Cq = CqTagged>>() {
    let l = listener::<S>();
    let info = msg_info::<S>();
    let c = side::<S>(host(&info), &info);
    c.ep.connect(&l.pep.name(), &[]).unwrap();
    let (sinfo, _) = conn_req(&l, &[]);
    drop(c);
    let s = side::<S>(host(&sinfo), &sinfo);
    assert_eq!(s.ep.accept(&[]), Err(Error::ConnAborted));
    assert_eq_quiet(&s.host.eq);
}

/// The passive endpoint's calls: listen needs an EQ, once; setname before listen; a
/// name in use is refused; a dropped listener refuses what it left unanswered.
fn passive_endpoint_calls<S: Config<Cq = CqTagged>>() {
    let info = msg_info::<S>();
    let h = host::<S>(&info);
    let pep = h.fabric.passive_ep(&info).unwrap();
    assert_eq!(pep.listen(), Err(Error::NoEq));
    pep.bind_eq(&h.eq).unwrap();
    assert_eq!(pep.bind_eq(&h.eq), Err(Error::Inval));
    let other = h.fabric.passive_ep(&info).unwrap();
    pep.set_name(&other.name()).unwrap();
    assert_eq!(pep.name(), other.name());
    pep.listen().unwrap();
    assert_eq!(pep.listen(), Err(Error::Inval));
    assert_eq!(pep.set_name(&other.name()), Err(Error::OpBadState));
    other.bind_eq(&h.eq).unwrap();
    assert_eq!(other.listen(), Err(Error::AddrInUse));
    // A request left unanswered when the listener goes is refused.
    let c = side::<S>(host(&info), &info);
    c.ep.connect(&pep.name(), &[]).unwrap();
    drop(pep);
    let e = expect_err(&c.host.eq, &[]);
    assert_eq!(e.err, Error::ConnRefused);
    // An RDM info makes no passive endpoint.
    let rdm = getinfo::<S>(Some(&Hints::new().ep_type(EpType::Rdm))).unwrap();
    assert!(h.fabric.passive_ep(&rdm[0]).is_err());
}

/// The EQ read-error content: context, data, err, prov_errno, err_data; a peek leaves
/// it, errors come before events.
fn eq_readerr_content<S: Config<Cq = CqTagged>>() {
    let l = listener::<S>();
    let info = msg_info::<S>();
    let c = side::<S>(host(&info), &info);
    c.ep.connect(&l.pep.name(), &[]).unwrap();
    let (sinfo, _) = conn_req(&l, &[]);
    l.pep
        .reject(sinfo.handle.as_ref().unwrap(), b"xyz")
        .unwrap();
    let end = Instant::now() + DEADLINE;
    while c.host.eq.read(true) != Err(Error::Avail) {
        assert!(Instant::now() < end, "no error event");
    }
    let peek = c.host.eq.read_err(true).unwrap();
    let e = c.host.eq.read_err(false).unwrap();
    assert_eq!(peek, e);
    assert_eq!(
        e,
        EqErrEntry {
            fid_context: Context::NULL,
            context: Context::NULL,
            data: 0,
            err: Error::ConnRefused,
            prov_errno: Error::ConnRefused.code(),
            err_data: b"xyz".to_vec(),
        }
    );
    assert_eq!(c.host.eq.read(false), Err(Error::Again));
}

// ---------------------------------------------------------------------------------------
// Data transfer over a connection
// ---------------------------------------------------------------------------------------

/// Messages both ways; the destination address is ignored.
fn msg_over_connection<S: Config<Cq = CqTagged>>() {
    let (c, s) = connected::<S>();
    let mut a = [0u8; 5];
    let mut b = [0u8; 3];
    // SAFETY: the buffers outlive the receives, which complete below.
    unsafe {
        s.ep.recv(&mut a, FiAddr::UNSPEC, Context(1)).unwrap();
        c.ep.recv(&mut b, FiAddr::UNSPEC, Context(2)).unwrap();
    }
    c.ep.send(b"ping!", FiAddr::UNSPEC, Context(3)).unwrap();
    // Any address reaches the peer.
    s.ep.inject(b"pon", FiAddr(12345)).unwrap();
    let e = wait_ok(&s.cq, &[&c.host.domain]);
    assert_eq!((e.op_context, e.len), (Context(1), 5));
    assert!(e.flags.contains(CqFlags::RECV | CqFlags::MSG));
    let mut got = vec![wait_ok(&c.cq, &[&s.host.domain]).op_context];
    got.push(wait_ok(&c.cq, &[&s.host.domain]).op_context);
    got.sort_by_key(|c| c.0);
    assert_eq!(got, [Context(2), Context(3)]);
    assert_eq!((&a, &b), (b"ping!", b"pon"));
}

/// Tagged messages with data over a connection.
fn tagged_over_connection<S: Config<Cq = CqTagged>>() {
    let (c, s) = connected::<S>();
    let mut buf = [0u8; 4];
    // SAFETY: buf outlives the receive, which completes below.
    unsafe {
        s.ep.trecv(&mut buf, FiAddr::UNSPEC, 0x77, 0, Context(1))
            .unwrap()
    };
    c.ep.tsenddata(b"tags", 0xda7a, FiAddr::UNSPEC, 0x66, Context(2))
        .unwrap();
    c.ep.tsenddata(b"tag!", 0xda7a, FiAddr::UNSPEC, 0x77, Context(3))
        .unwrap();
    let e = wait_ok(&s.cq, &[&c.host.domain]);
    assert_eq!((e.op_context, e.tag, e.data), (Context(1), 0x77, 0xda7a));
    assert_eq!(&buf, b"tag!");
    wait_ok(&c.cq, &[&s.host.domain]);
    wait_ok(&c.cq, &[&s.host.domain]);
}

/// RMA write and read, and atomics, against the peer's registered memory.
fn rma_atomic_over_connection<S: Config<Cq = CqTagged>>() {
    let (c, s) = connected::<S>();
    let mut mem = [0u8; 64];
    let attr = MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        requested_key: 0x42,
        ..MrAttr::default()
    };
    let mr = s.host.domain.mr_reg(&mut mem, &attr).unwrap();
    let (base, key) = (mr.remote_addr(), mr.key());
    c.ep.write(b"written", FiAddr::UNSPEC, base, key, Context(1))
        .unwrap();
    assert_eq!(wait_ok(&c.cq, &[&s.host.domain]).op_context, Context(1));
    let mut back = [0u8; 7];
    // SAFETY: back outlives the read, which completes below.
    unsafe {
        c.ep.read(&mut back, FiAddr::UNSPEC, base, key, Context(2))
            .unwrap()
    };
    assert_eq!(wait_ok(&c.cq, &[&s.host.domain]).op_context, Context(2));
    assert_eq!(&back, b"written");
    let one = 5u64.to_ne_bytes();
    c.ep.atomic(
        &one,
        Datatype::Uint64,
        AtomicOp::Sum,
        FiAddr::UNSPEC,
        base + 8,
        key,
        Context(3),
    )
    .unwrap();
    assert_eq!(wait_ok(&c.cq, &[&s.host.domain]).op_context, Context(3));
    let mut old = [0u8; 8];
    // SAFETY: old outlives the atomic, which completes below.
    unsafe {
        c.ep.fetch_atomic(
            &one,
            &mut old,
            Datatype::Uint64,
            AtomicOp::Sum,
            FiAddr::UNSPEC,
            base + 8,
            key,
            Context(4),
        )
        .unwrap()
    };
    assert_eq!(wait_ok(&c.cq, &[&s.host.domain]).op_context, Context(4));
    let old = u64::from_ne_bytes(old);
    drop(mr);
    assert_eq!(&mem[..7], b"written");
    assert_eq!(old, 5);
    assert_eq!(u64::from_ne_bytes(mem[8..16].try_into().unwrap()), 10);
}

/// An MSG endpoint binds no AV.
fn no_av_on_msg<S: Config<Cq = CqTagged>>() {
    let info = msg_info::<S>();
    let c = side::<S>(host(&info), &info);
    let av = c.host.domain.av(&fabric::attr::AvAttr::default()).unwrap();
    assert_eq!(c.ep.bind_av(&av), Err(Error::Inval));
    // Before the connection, transfers have nowhere to go.
    assert!(c.ep.send(b"x", FiAddr::UNSPEC, Context(1)).is_err());
}

macro_rules! cm_tests {
    ($m:ident, $stack:ty) => {
        mod $m {
            use super::*;
            type S = $stack;
            #[test]
            fn connect_accept() {
                super::connect_accept::<S>()
            }
            #[test]
            fn getpeer_and_cm_data_size() {
                super::getpeer_and_cm_data_size::<S>()
            }
            #[test]
            fn reject_with_data() {
                super::reject_with_data::<S>()
            }
            #[test]
            fn connect_to_nothing() {
                super::connect_to_nothing::<S>()
            }
            #[test]
            fn cm_data_over_limit() {
                super::cm_data_over_limit::<S>()
            }
            #[test]
            fn double_accept() {
                super::double_accept::<S>()
            }
            #[test]
            fn shutdown_by_client() {
                super::shutdown_by_client::<S>()
            }
            #[test]
            fn shutdown_by_server() {
                super::shutdown_by_server::<S>()
            }
            #[test]
            fn drop_mid_connection() {
                super::drop_mid_connection::<S>()
            }
            #[test]
            fn drop_before_accept() {
                super::drop_before_accept::<S>()
            }
            #[test]
            fn passive_endpoint_calls() {
                super::passive_endpoint_calls::<S>()
            }
            #[test]
            fn eq_readerr_content() {
                super::eq_readerr_content::<S>()
            }
            #[test]
            fn msg_over_connection() {
                super::msg_over_connection::<S>()
            }
            #[test]
            fn tagged_over_connection() {
                super::tagged_over_connection::<S>()
            }
            #[test]
            fn rma_atomic_over_connection() {
                super::rma_atomic_over_connection::<S>()
            }
            #[test]
            fn no_av_on_msg() {
                super::no_av_on_msg::<S>()
            }
        }
    };
}

cm_tests!(default, fabric::Stack<Prov>);
cm_tests!(safe, fabric::Stack<Prov, fabric::ThreadSafe>);
cm_tests!(safe_auto, fabric::Stack<Prov, fabric::ThreadSafe, fabric::Auto>);
cm_tests!(
    thread_ep_map,
    fabric::Stack<Prov, fabric::ThreadEndpoint, fabric::Manual, CqTagged, fabric::Map>
);
