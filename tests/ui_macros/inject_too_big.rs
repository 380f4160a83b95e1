// Loopback's InjectSize is U4096: a 8192-byte array inject does not compile.
use fabric::prelude::*;
use fabric_loopback::Loopback;

fn send(ep: &Endpoint<Stack<Loopback>>, to: FiAddr) {
    let _ = ep.tinject_array(&[0u8; 8192], to, 7);
}

fn main() {}
