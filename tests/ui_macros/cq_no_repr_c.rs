// Entries must have a defined layout.
#[derive(Clone, Copy, Default, fabric::CqFormat)]
struct Entry {
    context: fabric::Context,
    len: usize,
}

fn main() {}
