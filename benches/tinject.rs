//! Per-message cost of a tagged inject on the loopback provider.
//!
//! One iteration is one complete message on an established pair of endpoints of one
//! domain (tx and rx, each with its own CQ):
//!
//! 1. `trecv` posts the receive for the message (8-byte buffer, exact tag),
//! 2. `tinject` sends 8 bytes to it,
//! 3. `cq.read` on the receiver's CQ (which runs manual progress: the loopback inbox is
//!    drained, the message matched and copied) until the one completion is returned.
//!
//! So the figure is "post receive + inject + progress + completion read" per message,
//! measured for the default stack (`Stack<Loopback>`: ThreadDomain, Manual, CqTagged,
//! Table; no locks) and for `Stack<Loopback, ThreadSafe, Manual>` (every shared
//! structure behind a mutex).
//!
//! Run: `cargo bench --bench tinject -- --warm-up-time 1 --measurement-time 3`.
// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fabric::prelude::*;
use fabric::Config;
use fabric_loopback::Loopback;

struct Pair<S: Config> {
    _fabric: Fabric<S>,
    _domain: Domain<S>,
    _av: AddressVector<S>,
    tx: Endpoint<S>,
    _tx_cq: Cq<S>,
    rx: Endpoint<S>,
    rx_cq: Cq<S>,
    to_rx: FiAddr,
}

fn pair<S: Config>() -> Pair<S> {
    let hints = Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm);
    let info = getinfo::<S>(Some(&hints)).unwrap().remove(0);
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
    let (tx, tx_cq) = mk();
    let (rx, rx_cq) = mk();
    let to_rx = av.insert(&rx.name()).unwrap();
    Pair {
        _fabric: fabric,
        _domain: domain,
        _av: av,
        tx,
        _tx_cq: tx_cq,
        rx,
        rx_cq,
        to_rx,
    }
}

fn bench_stack<S>(c: &mut Criterion, name: &str)
where
    S: Config,
    S::Cq: CqFormat<Entry = CqTaggedEntry>,
{
    let p = pair::<S>();
    let mut buf = [0u8; 8];
    let mut tag = 0u64;
    let mut e = [CqTaggedEntry::default(); 1];
    let mut g = c.benchmark_group("tinject+trecv+cq_read");
    g.throughput(Throughput::Elements(1));
    g.bench_function(name, |b| {
        b.iter(|| {
            tag = tag.wrapping_add(1);
            // SAFETY: `buf` is not touched until the receive completes below.
            unsafe { p.rx.trecv(&mut buf, FiAddr::UNSPEC, tag, 0, Context(0)) }.unwrap();
            p.tx.tinject(&tag.to_le_bytes(), p.to_rx, tag).unwrap();
            loop {
                match p.rx_cq.read(&mut e) {
                    Ok(_) => break,
                    Err(Error::Again) => {}
                    Err(err) => panic!("cq read: {err}"),
                }
            }
            debug_assert_eq!(e[0].tag, tag);
            black_box(&buf);
        })
    });
    g.finish();
    assert_eq!(u64::from_le_bytes(buf), tag, "last message did not arrive");
}

fn benches(c: &mut Criterion) {
    bench_stack::<Stack<Loopback>>(c, "default (ThreadDomain, Manual)");
    bench_stack::<Stack<Loopback, ThreadSafe, Manual>>(c, "ThreadSafe, Manual");
}

criterion_group!(tinject, benches);
criterion_main!(tinject);
