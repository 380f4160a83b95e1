//! The `cell_parse` fuzz target (`fuzz/fuzz_targets`) on the stable toolchain: the same
//! check, fed by proptest with control words of every kind and cells of random peer
//! bytes, for a bounded number of cases (`PROPTEST_CASES`, default below). cargo-fuzz
//! explores further where a nightly toolchain exists.

use proptest::prelude::*;

include!("../fuzz/fuzz_targets/cell_parse_check.rs");

/// Cases per run: a few seconds in a debug build.
const CASES: u32 = 5_000;

/// A control word: random, with its kind nibble (bits 32..36) set to `kind` so every
/// parser lane is reached, not only the error path of unknown kinds.
fn word() -> impl Strategy<Value = u64> {
    (any::<u64>(), 0u64..16).prop_map(|(w, kind)| (w & !(0xf << 32)) | kind << 32)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn peer_cells_never_break_the_parsers(
        w in word(),
        cells in prop::collection::vec(any::<u8>(), 0..140 * 64),
    ) {
        let mut data = w.to_le_bytes().to_vec();
        data.extend_from_slice(&cells);
        check(&data);
    }

    /// Small lengths in the control word's length bits, where the parsers accept more.
    #[test]
    fn short_lengths_reach_the_accepting_paths(
        w in word(),
        len in 0u64..9000,
        cells in prop::collection::vec(any::<u8>(), 64..20 * 64),
    ) {
        let w = (w & !(0xffff << 40)) | (len & 0xffff) << 40;
        let mut data = w.to_le_bytes().to_vec();
        data.extend_from_slice(&cells);
        check(&data);
    }
}
