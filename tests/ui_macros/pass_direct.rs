// `direct!` with explicit and default arguments names the expected stacks.
use fabric::prelude::*;

fn same<A: 'static, B: 'static>() -> bool {
    std::any::TypeId::of::<A>() == std::any::TypeId::of::<B>()
}

type Dflt = fabric::direct!(provider = "loopback");
type Safe = fabric::direct!(provider = "loopback", threading = Safe, progress = Auto, cq = Msg, av = Map);
type Typed = fabric::direct!(provider = fabric_loopback::Loopback, cq = fabric::CqData,);

fn main() {
    assert!(same::<Dflt, Stack<fabric_loopback::Loopback>>());
    assert!(same::<Safe, Stack<fabric_loopback::Loopback, ThreadSafe, Auto, CqMsg, Map>>());
    assert!(same::<Typed, Stack<fabric_loopback::Loopback, ThreadDomain, Manual, CqData>>());
    let info = getinfo::<Safe>(None).unwrap().remove(0);
    let _fabric = Fabric::<Safe>::open(&info).unwrap();
}
