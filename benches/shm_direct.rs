//! Cost of an 8-byte RMA write to completion on the shm provider, into a directly
//! mapped segment (the initiator stores, the target does nothing) and into ordinary
//! registered memory (a request through the target's ring, answered when the target
//! progresses, here in the same thread). Two endpoints of one process, default stack.
//! Also a direct write while another initiator writes the same segment.
//!
//! Run: `cargo bench --bench shm_direct -- --warm-up-time 1 --measurement-time 3`.
// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fabric::prelude::*;
use fabric_shm::{MappedSegment, Shm};

type S = Stack<Shm>;

struct Node {
    ep: Endpoint<S>,
    cq: Cq<S>,
    av: AddressVector<S>,
    domain: Domain<S>,
    _fabric: Fabric<S>,
}

fn node() -> Node {
    let hints = Hints::new().caps(Caps::RMA).ep_type(EpType::Rdm);
    let info = getinfo::<S>(Some(&hints)).unwrap().remove(0);
    let fabric = Fabric::<S>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    ep.bind_av(&av).unwrap();
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)
        .unwrap();
    ep.enable().unwrap();
    Node {
        ep,
        cq,
        av,
        domain,
        _fabric: fabric,
    }
}

const KEY_DIRECT: u64 = 0xbe_0001;
const KEY_RING: u64 = 0xbe_0002;

fn attr(key: u64) -> MrAttr {
    MrAttr {
        access: MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        requested_key: key,
        ..MrAttr::DEFAULT
    }
}

fn write8(c: &mut Criterion) {
    let target = node();
    let init = node();
    let mut seg = MappedSegment::new(4096).unwrap();
    let _direct = seg.register(&target.domain, &attr(KEY_DIRECT)).unwrap();
    let mut plain = vec![0u8; 4096];
    let _ring = target.domain.mr_reg(&mut plain, &attr(KEY_RING)).unwrap();
    let peer = init.av.insert(&target.ep.name()).unwrap();
    let mut g = c.benchmark_group("shm_write8");
    g.throughput(Throughput::Elements(1));
    for (name, key, progress_target) in [("direct", KEY_DIRECT, false), ("ring", KEY_RING, true)] {
        let mut e = [CqTaggedEntry::default(); 1];
        g.bench_function(name, |b| {
            b.iter(|| {
                init.ep
                    .write(&7u64.to_ne_bytes(), peer, 64, key, Context(1))
                    .unwrap();
                loop {
                    if progress_target {
                        target.domain.progress();
                    }
                    match init.cq.read(&mut e) {
                        Ok(1) => break,
                        Ok(_) | Err(Error::Again) => {}
                        Err(err) => panic!("write completion: {err}"),
                    }
                }
            })
        });
    }
    g.finish();
}

/// `fi_inject_write` of 8 bytes into a mapped segment while a second initiator (another
/// endpoint, in a thread of its own) writes another cache line of the same segment
/// without pause: what many-to-one one-sided traffic (a SHMEM symmetric heap) costs
/// each initiator. The two share nothing but the segment's header.
fn write8_beside_another_initiator(c: &mut Criterion) {
    let target = node();
    let init = node();
    let mut seg = MappedSegment::new(4096).unwrap();
    let _direct = seg.register(&target.domain, &attr(KEY_DIRECT)).unwrap();
    let name = target.ep.name();
    let peer = init.av.insert(&name).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let other = node();
            let peer = other.av.insert(&name).unwrap();
            while !stop.load(Ordering::Relaxed) {
                other
                    .ep
                    .inject_write(&1u64.to_ne_bytes(), peer, 128, KEY_DIRECT)
                    .unwrap();
            }
        });
        let mut g = c.benchmark_group("shm_write8_shared");
        g.throughput(Throughput::Elements(1));
        g.bench_function("direct_inject", |b| {
            b.iter(|| {
                init.ep
                    .inject_write(&7u64.to_ne_bytes(), peer, 64, KEY_DIRECT)
                    .unwrap()
            })
        });
        g.finish();
        stop.store(true, Ordering::Relaxed);
    });
}

criterion_group!(benches, write8, write8_beside_another_initiator);
criterion_main!(benches);
