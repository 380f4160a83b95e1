//! The core's lock cells cannot be made or entered from outside the crate: re-entering
//! an unlocked cell from inside its own closure would hand out two `&mut` to one value.
//! The families are public (a stack names one); the cells' trait is not.
use fabric::config::{LockFamily, Unlocked};
use fabric::lock::Lock;

fn twice<F: LockFamily>() {
    let a = F::Lock::<u32>::new(1);
    a.with(|x| a.with(|y| *x += *y));
}

fn main() {
    twice::<Unlocked>();
}
