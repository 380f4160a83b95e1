// 1500 bytes fit Loopback's inject size, but typenum's const bridge has no `Const<1500>`:
// the array call does not compile (with a note pointing at the slice call).
use fabric::prelude::*;
use fabric_loopback::Loopback;

fn send(ep: &Endpoint<Stack<Loopback>>, to: FiAddr) {
    let _ = ep.inject_array(&[0u8; 1500], to);
}

fn main() {}
