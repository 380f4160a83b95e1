//! Lock families chosen by the threading and progress parameters.
//!
//! [`Unlocked`] wraps state in a cell that is neither `Send` nor `Sync`, so every object
//! holding it is pinned to one thread by the compiler: this is how `ThreadDomain` makes
//! "the application serializes access" a type error to violate, at zero run-time cost.
//! [`Locked`] wraps state in a mutex and makes objects `Send + Sync`.
#![allow(unsafe_code)]

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use std::sync::{Mutex, MutexGuard};

mod sealed {
    pub trait Sealed {}
}

/// State behind a lock of the family chosen by the stack.
///
/// Crate-private: [`Unsync::with`] is sound only because no code calls `with` on a
/// lock from inside the closure given to `with` on the same lock, which this crate
/// keeps (a debug assertion checks it) and nobody outside can break, since nobody
/// outside can make a lock or call `with` (a must-not-compile test checks that).
pub(crate) trait Lock<X>: Sized {
    /// Wraps a value.
    fn new(x: X) -> Self;
    /// Runs `f` with exclusive access. Never called on the same lock from inside `f`.
    fn with<R>(&self, f: impl FnOnce(&mut X) -> R) -> R;
}

/// A family of locks (`Unlocked` or `Locked`). Sealed; its locks can be made and
/// used only inside this crate.
#[allow(private_bounds)]
pub trait LockFamily: sealed::Sealed + 'static {
    /// The lock type for state `X`.
    type Lock<X>: Lock<X>;
    /// Whether objects of this family may be used from several threads at once. When
    /// not, state outside the locks (a counter's atomic words) has one writer at a
    /// time and needs no read-modify-write instruction.
    const SHARED: bool;
}

/// No locking: state in an `UnsafeCell`; objects are `!Send + !Sync`.
pub enum Unlocked {}
/// Real locking (a mutex per object); objects are `Send + Sync`.
pub enum Locked {}

impl sealed::Sealed for Unlocked {}
impl sealed::Sealed for Locked {}

impl LockFamily for Unlocked {
    type Lock<X> = Unsync<X>;
    const SHARED: bool = false;
}
impl LockFamily for Locked {
    type Lock<X> = Mutexed<X>;
    const SHARED: bool = true;
}

/// The unlocked cell of [`Unlocked`]. `!Send` and `!Sync` through its marker.
pub struct Unsync<X> {
    cell: UnsafeCell<X>,
    #[cfg(debug_assertions)]
    busy: core::cell::Cell<bool>,
    _not_send_sync: PhantomData<*mut ()>,
}

impl<X> Lock<X> for Unsync<X> {
    #[inline]
    fn new(x: X) -> Self {
        Unsync {
            cell: UnsafeCell::new(x),
            #[cfg(debug_assertions)]
            busy: core::cell::Cell::new(false),
            _not_send_sync: PhantomData,
        }
    }

    #[inline(always)]
    fn with<R>(&self, f: impl FnOnce(&mut X) -> R) -> R {
        #[cfg(debug_assertions)]
        {
            assert!(
                !self.busy.replace(true),
                "re-entrant access to unlocked fabric state"
            );
            struct Reset<'a>(&'a core::cell::Cell<bool>);
            impl Drop for Reset<'_> {
                fn drop(&mut self) {
                    self.0.set(false);
                }
            }
            let _reset = Reset(&self.busy);
            // SAFETY: `Unsync` is !Sync and !Send (the raw-pointer marker), so only the
            // owning thread reaches it; the busy flag above proves `with` is not re-entered,
            // so this is the only live reference.
            f(unsafe { &mut *self.cell.get() })
        }
        #[cfg(not(debug_assertions))]
        {
            // SAFETY: as above; crate code never re-enters `with` on one lock (checked in
            // debug builds by the busy flag), and !Sync/!Send keeps other threads out.
            f(unsafe { &mut *self.cell.get() })
        }
    }
}

/// The mutex of [`Locked`].
pub struct Mutexed<X>(Mutex<X>);

impl<X> Mutexed<X> {
    #[inline]
    fn guard(&self) -> MutexGuard<'_, X> {
        // A panic while holding the lock leaves consistent-enough state for cleanup paths;
        // poisoning would turn one failure into a cascade of unrelated panics.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<X> Lock<X> for Mutexed<X> {
    #[inline]
    fn new(x: X) -> Self {
        Mutexed(Mutex::new(x))
    }

    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut X) -> R) -> R {
        f(&mut self.guard())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_families_give_exclusive_access() {
        let a = <Unlocked as LockFamily>::Lock::new(1u32);
        a.with(|x| *x += 1);
        assert_eq!(a.with(|x| *x), 2);
        let b = <Locked as LockFamily>::Lock::new(1u32);
        b.with(|x| *x += 2);
        assert_eq!(b.with(|x| *x), 3);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "re-entrant")]
    fn reentry_is_caught_in_debug() {
        let a = <Unlocked as LockFamily>::Lock::new(0u32);
        a.with(|_| a.with(|_| ()));
    }
}
