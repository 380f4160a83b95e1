// A derived format with a subset of the fields, in any order, is a stack's CQ format.
use fabric::prelude::*;
use fabric_loopback::Loopback;

#[derive(Clone, Copy, Default, Debug, fabric::CqFormat)]
#[repr(C)]
struct Entry {
    tag: u64,
    context: Context,
    src: FiAddr,
}

type Net = Stack<Loopback, ThreadDomain, Manual, Entry>;

fn main() {
    let info = getinfo::<Net>(None).unwrap().remove(0);
    let fabric = Fabric::<Net>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let mut out = [Entry::default(); 2];
    assert_eq!(cq.read(&mut out), Err(Error::Again));
    assert_eq!(<Entry as CqFormat>::KIND, CqFormatKind::Unspec);
}
