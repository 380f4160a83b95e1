// `tag` is a u64 completion field: declaring it u32 does not compile.
#[derive(Clone, Copy, Default, fabric::CqFormat)]
#[repr(C)]
struct Entry {
    context: fabric::Context,
    tag: u32,
}

fn main() {}
