//! `ThreadDomain` objects cannot be shared by reference with a scoped thread either.
use fabric::prelude::*;
use fabric_loopback::Loopback;

type Net = Stack<Loopback, ThreadDomain>;

fn main() {
    let info = getinfo::<Net>(None).unwrap().remove(0);
    let domain = Fabric::<Net>::open(&info).unwrap().domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    let (ep, cq) = (&ep, &cq);
    std::thread::scope(|s| {
        s.spawn(move || {
            ep.inject(b"x", FiAddr(0)).ok();
            cq.read(&mut [CqTaggedEntry::default(); 1]).ok();
        });
    });
}
