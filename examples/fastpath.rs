//! A fixed number of `tinject` + receiver CQ reads on the default loopback stack, for
//! counting instructions per message with callgrind (`benches/fastpath_callgrind.sh`).
//!
//! Usage: `fastpath [messages] [array]` (default 100000). One message = `trecv` repost +
//! `tinject` of 8 bytes + one `cq.read` that progresses, matches and returns the entry.
//! With `array` the send is `tinject_array` (length proven at compile time, no run-time
//! length test) instead of `tinject` of a slice.

use fabric::prelude::*;
use fabric_loopback::Loopback;

type Net = Stack<Loopback>;

fn main() -> Result<()> {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let array = std::env::args().nth(2).is_some_and(|a| a == "array");
    let info =
        getinfo::<Net>(Some(&Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm)))?.remove(0);
    let fabric = Fabric::<Net>::open(&info)?;
    let domain = fabric.domain(&info)?;
    let cq = domain.cq(&CqAttr::DEFAULT)?;
    let av = domain.av(&AvAttr::DEFAULT)?;
    let ep = domain.endpoint(&info)?;
    ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV)?;
    ep.bind_av(&av)?;
    ep.enable()?;
    let me = av.insert(&ep.name())?;
    let mut buf = [0u8; 8];
    let mut entries = [CqTaggedEntry::default(); 4];
    let mut sum = 0u64;
    for i in 0..n {
        // SAFETY: `buf` lives across the loop and is read only after the completion.
        unsafe { ep.trecv(&mut buf, FiAddr::UNSPEC, 42, 0, Context(1))? };
        if array {
            ep.tinject_array(&i.to_le_bytes(), me, 42)?;
        } else {
            ep.tinject(&i.to_le_bytes(), me, 42)?;
        }
        loop {
            match cq.read(&mut entries) {
                Ok(_) => break,
                Err(Error::Again) => continue,
                Err(e) => return Err(e),
            }
        }
        sum = sum.wrapping_add(u64::from_le_bytes(buf));
    }
    assert_eq!(sum, n * n.saturating_sub(1) / 2);
    println!("{n} messages, checksum ok");
    Ok(())
}
