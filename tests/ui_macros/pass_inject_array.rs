// Arrays up to the inject size compile (4096 is the limit itself).
use fabric::prelude::*;
use fabric_loopback::Loopback;

#[allow(dead_code)]
fn send(ep: &Endpoint<Stack<Loopback>>, to: FiAddr) -> fabric::Result<()> {
    ep.tinject_array(&[0u8; 8], to, 7)?;
    ep.inject_array(&[0u8; 1024], to)?;
    ep.tinjectdata_array(&[0u8; 4096], 1, to, 7)?;
    ep.injectdata_array(&[0u8; 0], 1, to)
}

fn main() {}
