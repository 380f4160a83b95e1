//! Compiles the C long double atomic kernels (`csrc/atomic_ld.c`) where the target's
//! `long double` is the x86 80-bit extended format, and tells the crate so through the
//! `fabric_ld80` cfg. Elsewhere `FI_LONG_DOUBLE{,_COMPLEX}` atomics report
//! `FI_EOPNOTSUPP` instead of being computed in a narrower type.

use std::env;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=csrc/atomic_ld.c");
    println!("cargo::rustc-check-cfg=cfg(fabric_ld80)");

    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let target_env = env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    // MSVC's long double is a plain double; every other x86_64 ABI uses the 80-bit
    // extended format in 16 bytes of storage.
    if arch == "x86_64" && target_env != "msvc" {
        cc::Build::new()
            .file("csrc/atomic_ld.c")
            .warnings(true)
            .extra_warnings(true)
            .compile("fabric_atomic_ld");
        println!("cargo::rustc-cfg=fabric_ld80");
    }
}
