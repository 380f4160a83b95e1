//! Fuzzes the receive-cell parser with arbitrary peer bytes: it must never panic, and
//! every length and offset it yields must lie inside the cells it was given. The same
//! check runs on the stable toolchain, from random inputs, in `tests/cell_parse.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("cell_parse_check.rs");

fuzz_target!(|data: &[u8]| check(data));
