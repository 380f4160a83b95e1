//! A view of bytes another process may write (`SharedBytes`) is made over arbitrary
//! memory only with `unsafe`: safe code could otherwise read past a mapping.
use fabric::SharedBytes;

fn main() {
    let data = [1u8; 4];
    let forged = SharedBytes::new(data.as_ptr(), 4096);
    let mut out = [0u8; 4096];
    let _ = forged.copy_to(0, &mut out);
}
