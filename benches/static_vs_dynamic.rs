//! Static stack vs run-time dispatch (`fabric::dynamic`): the same message loops through
//! `Stack<Loopback, T, R, C, A>` objects and through `Registry<(Loopback,)>` + `Dyn*`
//! objects opened with the same threading level, progress model, CQ format and AV type.
//!
//! Two loops, both on the loopback provider, manual progress, Table AV:
//!
//! * `inject_cq_read/<path>/<threading>/<cq format>`: one iteration is one message on an
//!   established pair of endpoints of one domain (each with its own CQ): `trecv` (8-byte
//!   buffer, exact tag), `tinject` of 8 bytes, then reads of the receiver's CQ (which runs
//!   manual progress) until the completion is returned, in the CQ's own entry type
//!   (the dyn CQ reads typed entries of its format too). Threading `Domain` with each of
//!   the four CQ formats, and `Safe` with the tagged format.
//! * `pingpong/<path>/<threading>`: one iteration is one round trip of an 8-byte tagged
//!   message between two endpoints of one domain (each with its own CQ): both receives
//!   posted, `tinject` A to B, B's CQ read until the ping completes, `tinject` B to A,
//!   A's CQ read until the pong completes.
//!
//! Static and dynamic variants of one configuration run in the same invocation, one after
//! the other, so that they can be compared on a shared (noisy) machine: read the medians
//! (`target/criterion/<group>/<path>_<threading>_<format>/new/estimates.json`) and their
//! ratios. `benches/static_vs_dynamic_table.sh` runs this and prints the table.
//!
//! Run: `cargo bench --bench static_vs_dynamic -- --warm-up-time 1 --measurement-time 2`.
// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fabric::dynamic::prelude::*;
use fabric::dynamic::{Choice, DynCq, DynEndpoint, DynFabric};
use fabric::prelude::*;
use fabric::Config;
use fabric_loopback::Loopback;

type Dyn = Registry<(Loopback,)>;

/// The tag every ping-pong message carries.
const PP_TAG: u64 = 0x7070;

fn hints(threading: ThreadingLevel) -> Hints {
    Hints::new()
        .caps(Caps::TAGGED)
        .ep_type(EpType::Rdm)
        .threading(threading)
}

/// One message endpoint (bound to its own CQ) as the loops use it: the three data calls
/// they make. Implemented once for the static objects (inherent methods, monomorphized)
/// and once for the dyn objects (trait objects), so both run the identical loop.
trait Side {
    /// Posts a receive of 8 bytes into `buf` for exactly `tag`.
    ///
    /// # Safety
    ///
    /// `buf` must stay valid and untouched until the receive completes.
    unsafe fn trecv(&self, buf: &mut [u8; 8], tag: u64);
    /// Injects 8 bytes to `dest` with `tag`.
    fn tinject(&self, data: &[u8; 8], dest: FiAddr, tag: u64);
    /// Reads the CQ (running manual progress) until one completion is returned.
    fn wait_one(&mut self);
}

struct StaticSide<S: Config> {
    ep: Endpoint<S>,
    cq: Cq<S>,
    entry: [<S::Cq as CqFormat>::Entry; 1],
}

impl<S: Config> Side for StaticSide<S> {
    #[inline]
    unsafe fn trecv(&self, buf: &mut [u8; 8], tag: u64) {
        // SAFETY: forwarded contract.
        unsafe { self.ep.trecv(buf, FiAddr::UNSPEC, tag, 0, Context(1)) }.unwrap();
    }
    #[inline]
    fn tinject(&self, data: &[u8; 8], dest: FiAddr, tag: u64) {
        self.ep.tinject(data, dest, tag).unwrap();
    }
    #[inline]
    fn wait_one(&mut self) {
        loop {
            match self.cq.read(&mut self.entry) {
                Ok(_) => break,
                Err(Error::Again) => {}
                Err(err) => panic!("cq read: {err}"),
            }
        }
        black_box(&self.entry);
    }
}

struct DynSide<E> {
    ep: DynEndpoint,
    cq: DynCq,
    entry: [E; 1],
}

impl<E> Side for DynSide<E>
where
    [E]: CqBuf,
{
    #[inline]
    unsafe fn trecv(&self, buf: &mut [u8; 8], tag: u64) {
        // SAFETY: forwarded contract.
        unsafe { self.ep.trecv(buf, FiAddr::UNSPEC, tag, 0, Context(1)) }.unwrap();
    }
    #[inline]
    fn tinject(&self, data: &[u8; 8], dest: FiAddr, tag: u64) {
        self.ep.tinject(data, dest, tag).unwrap();
    }
    #[inline]
    fn wait_one(&mut self) {
        loop {
            match self.cq.read(&mut self.entry[..]) {
                Ok(_) => break,
                Err(Error::Again) => {}
                Err(err) => panic!("cq read: {err}"),
            }
        }
        black_box(&self.entry);
    }
}

/// Two endpoints of one domain, each with its own CQ, and their addresses in one AV.
/// The fabric, domain and AV are kept alive (and dropped after the endpoints).
struct Pair<X, K> {
    a: X,
    b: X,
    to_a: FiAddr,
    to_b: FiAddr,
    _keep: K,
}

fn static_pair<S: Config>(threading: ThreadingLevel) -> Pair<StaticSide<S>, impl Sized> {
    let info = getinfo::<S>(Some(&hints(threading))).unwrap().remove(0);
    let fabric = Fabric::<S>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let attr = CqAttr {
        format: <S::Cq as CqFormat>::KIND,
        ..CqAttr::DEFAULT
    };
    let side = || {
        let cq = domain.cq(&attr).unwrap();
        let ep = domain.endpoint(&info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
            .unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        StaticSide {
            ep,
            cq,
            entry: [Default::default()],
        }
    };
    let (a, b) = (side(), side());
    let to_a = av.insert(&a.ep.name()).unwrap();
    let to_b = av.insert(&b.ep.name()).unwrap();
    Pair {
        a,
        b,
        to_a,
        to_b,
        _keep: (av, domain, fabric),
    }
}

fn dyn_pair<E: Copy + Default>(
    threading: ThreadingLevel,
    format: CqFormatKind,
) -> Pair<DynSide<E>, impl Sized>
where
    [E]: CqBuf,
{
    let info = Dyn::getinfo(Some(&hints(threading))).unwrap().remove(0);
    let fabric: DynFabric = Dyn::fabric(&info).unwrap();
    // The dynamic layer must have picked the stack the static variant names.
    assert_eq!(
        fabric.choice(),
        Choice {
            provider: "loopback",
            threading,
            progress: ProgressMode::Manual,
            av_type: AvKind::Table,
        }
    );
    let domain = fabric.domain(&info).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let attr = CqAttr {
        format,
        ..CqAttr::DEFAULT
    };
    let side = || {
        let cq = domain.cq(&attr).unwrap();
        assert_eq!(cq.format(), format);
        let ep = domain.endpoint(&info).unwrap();
        ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
            .unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        DynSide {
            ep,
            cq,
            entry: [E::default()],
        }
    };
    let (a, b) = (side(), side());
    let to_a = av.insert(&a.ep.name()).unwrap();
    let to_b = av.insert(&b.ep.name()).unwrap();
    Pair {
        a,
        b,
        to_a,
        to_b,
        _keep: (av, domain, fabric),
    }
}

fn threading_name(t: ThreadingLevel) -> &'static str {
    match t {
        ThreadingLevel::Safe => "Safe",
        _ => "Domain",
    }
}

fn format_name(f: CqFormatKind) -> &'static str {
    match f {
        CqFormatKind::Context => "context",
        CqFormatKind::Msg => "msg",
        CqFormatKind::Data => "data",
        _ => "tagged",
    }
}

/// `inject_cq_read`: `a` sends, `b` receives, one message per iteration.
fn inject_loop<X: Side, K>(c: &mut Criterion, id: &str, mut p: Pair<X, K>) {
    let mut buf = [0u8; 8];
    let mut tag = 0u64;
    let mut g = c.benchmark_group("inject_cq_read");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::from_parameter(id), |bch| {
        bch.iter(|| {
            tag = tag.wrapping_add(1);
            // SAFETY: `buf` is not touched until the receive completes below.
            unsafe { p.b.trecv(&mut buf, tag) };
            p.a.tinject(&tag.to_le_bytes(), p.to_b, tag);
            p.b.wait_one();
            black_box(&buf);
        })
    });
    g.finish();
    assert_eq!(u64::from_le_bytes(buf), tag, "{id}: last message lost");
}

/// `pingpong`: one round trip per iteration.
fn pingpong_loop<X: Side, K>(c: &mut Criterion, id: &str, mut p: Pair<X, K>) {
    let mut ping = [0u8; 8];
    let mut pong = [0u8; 8];
    let mut n = 0u64;
    let mut g = c.benchmark_group("pingpong");
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::from_parameter(id), |bch| {
        bch.iter(|| {
            n = n.wrapping_add(1);
            // SAFETY: `ping`/`pong` are not touched until the receives complete below.
            unsafe {
                p.b.trecv(&mut ping, PP_TAG);
                p.a.trecv(&mut pong, PP_TAG);
            }
            p.a.tinject(&n.to_le_bytes(), p.to_b, PP_TAG);
            p.b.wait_one();
            p.b.tinject(&ping, p.to_a, PP_TAG);
            p.a.wait_one();
            black_box(&pong);
        })
    });
    g.finish();
    assert_eq!(u64::from_le_bytes(pong), n, "{id}: last round trip lost");
}

/// Static then dynamic inject loop of one configuration.
fn inject_pair<S, E>(c: &mut Criterion, threading: ThreadingLevel)
where
    S: Config,
    S::Cq: CqFormat<Entry = E>,
    E: Copy + Default,
    [E]: CqBuf,
{
    let format = <S::Cq as CqFormat>::KIND;
    let cfg = format!("{}_{}", threading_name(threading), format_name(format));
    inject_loop(c, &format!("static_{cfg}"), static_pair::<S>(threading));
    inject_loop(
        c,
        &format!("dynamic_{cfg}"),
        dyn_pair::<E>(threading, format),
    );
}

/// Static then dynamic ping-pong of one threading level (tagged CQ).
fn pingpong_pair<S: Config>(c: &mut Criterion, threading: ThreadingLevel)
where
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let cfg = threading_name(threading);
    pingpong_loop(c, &format!("static_{cfg}"), static_pair::<S>(threading));
    pingpong_loop(
        c,
        &format!("dynamic_{cfg}"),
        dyn_pair::<CqTaggedEntry>(threading, CqFormatKind::Tagged),
    );
}

fn benches(c: &mut Criterion) {
    use ThreadingLevel::{Domain, Safe};
    // The default stack: ThreadDomain, Manual, CqTagged, Table.
    inject_pair::<Stack<Loopback>, _>(c, Domain);
    inject_pair::<Stack<Loopback, ThreadSafe, Manual>, _>(c, Safe);
    inject_pair::<Stack<Loopback, ThreadDomain, Manual, CqContext>, _>(c, Domain);
    inject_pair::<Stack<Loopback, ThreadDomain, Manual, CqMsg>, _>(c, Domain);
    inject_pair::<Stack<Loopback, ThreadDomain, Manual, CqData>, _>(c, Domain);
    pingpong_pair::<Stack<Loopback>>(c, Domain);
    pingpong_pair::<Stack<Loopback, ThreadSafe, Manual>>(c, Safe);
}

criterion_group!(static_vs_dynamic, benches);
criterion_main!(static_vs_dynamic);
