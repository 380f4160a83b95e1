//! `ThreadDomain` objects cannot be moved to another thread: the application promised
//! to serialize access per domain, and the compiler holds it to that.
use fabric::prelude::*;
use fabric_loopback::Loopback;

type Net = Stack<Loopback, ThreadDomain>;

fn main() {
    let info = getinfo::<Net>(None).unwrap().remove(0);
    let domain = Fabric::<Net>::open(&info).unwrap().domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    std::thread::spawn(move || {
        ep.bind_cq(&cq, BindFlags::TRANSMIT).unwrap();
        ep.enable().unwrap();
    });
}
