//! Soundness proofs at compile time: `tests/ui/sound_*.rs` must NOT compile (what safe
//! code outside the crate must not reach). Regenerate the expected diagnostics with
//! `TRYBUILD=overwrite cargo test -p fabric --test soundness`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/sound_*.rs");
}
