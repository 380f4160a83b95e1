//! Generates the C struct layouts of libfabric's public headers with bindgen.

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_type("fi_.*|fid.*")
        .allowlist_var("FI_.*")
        .allowlist_function("fi_strerror|fi_dupinfo|fi_freeinfo")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(true)
        .generate()
        .expect("bindgen over rdma/*.h (apt-get install libfabric-dev libclang-dev)")
        .write_to_file(out.join("ofi.rs"))
        .expect("writing ofi.rs");
}
