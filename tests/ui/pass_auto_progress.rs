//! With `ThreadDomain` and `Auto` progress the endpoint and CQ are `Send + Sync` (the
//! progress thread shares every object, so auto progress always locks): an endpoint
//! moved into a spawned thread sends, scoped threads share `&ep`/`&cq`, and everything
//! arrives.
use fabric::prelude::*;
use fabric_loopback::Loopback;

type Net = Stack<Loopback, ThreadDomain, Auto>;

fn assert_send_sync<X: Send + Sync>(_: &X) {}

fn read_one(cq: &Cq<Net>) -> CqTaggedEntry {
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        match cq.read(&mut e) {
            Ok(_) => return e[0],
            Err(Error::Again) => std::thread::yield_now(),
            Err(err) => panic!("{err}"),
        }
    }
}

fn main() {
    let hints = Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm);
    let info = getinfo::<Net>(Some(&hints)).unwrap().remove(0);
    let fabric = Fabric::<Net>::open(&info).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let av = domain.av(&AvAttr::DEFAULT).unwrap();
    let cq = domain.cq(&CqAttr::DEFAULT).unwrap();
    let rx = domain.endpoint(&info).unwrap();
    rx.bind_cq(&cq, BindFlags::RECV | BindFlags::TRANSMIT)
        .unwrap();
    rx.bind_av(&av).unwrap();
    rx.enable().unwrap();
    let tx = domain.endpoint(&info).unwrap();
    tx.bind_cq(&cq, BindFlags::RECV | BindFlags::TRANSMIT)
        .unwrap();
    tx.bind_av(&av).unwrap();
    tx.enable().unwrap();
    let to_rx = av.insert(&rx.name()).unwrap();
    assert_send_sync(&tx);
    assert_send_sync(&cq);

    let mut bufs = [[0u8; 1]; 2];
    for (i, b) in bufs.iter_mut().enumerate() {
        // SAFETY: the buffers are read only after both receives complete below.
        unsafe { rx.trecv(b, FiAddr::UNSPEC, i as u64, 0, Context(i)) }.unwrap();
    }
    // Shared by reference with a scoped thread...
    let (txr, cqr) = (&tx, &cq);
    std::thread::scope(|s| {
        s.spawn(move || {
            txr.tinject(&[10], to_rx, 0).unwrap();
            assert_eq!(read_one(cqr).tag, 0);
        });
    });
    // ...and moved into a spawned one.
    std::thread::spawn(move || {
        tx.tinject(&[11], to_rx, 1).unwrap();
        assert_eq!(read_one(&cq).tag, 1);
    })
    .join()
    .unwrap();
    assert_eq!(bufs, [[10], [11]]);
}
