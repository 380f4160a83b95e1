//! Bytes another process may write (`SharedBytes`: a packet in a shared ring, a peer's
//! segment) are only ever copied out: safe code cannot turn them into a slice, which
//! would promise they stay unchanged while a peer writes them.
use fabric::{NoPull, Payload, SharedBytes};

fn main() {
    let data = [1u8; 4];
    let s = SharedBytes::from(&data);
    let deref: &[u8] = &s;
    let as_ref: &[u8] = s.as_ref();
    let index = s[0];
    let p = Payload::<NoPull>::Inline(s);
    let inline: Option<&[u8]> = p.inline();
    let _ = (deref, as_ref, index, inline);
}
