// Only completion fields are allowed.
#[derive(Clone, Copy, Default, fabric::CqFormat)]
#[repr(C)]
struct Entry {
    context: fabric::Context,
    colour: u64,
}

fn main() {}
