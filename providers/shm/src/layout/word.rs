//! The 64-bit word the provider's lock-free protocols over shared memory are written
//! over (the channel table's claims, the busy lanes of mapped segments): the std
//! atomic, or loom's in their models, so the models run the protocols' own code.

use std::sync::atomic::Ordering;

/// A 64-bit atomic of a shared protocol (the std one, or loom's in a model).
pub(crate) trait Word {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, v: u64, order: Ordering);
    /// `current` to `new`; whether this call made that change.
    fn swap_if(&self, current: u64, new: u64) -> bool;
    fn fetch_max(&self, v: u64, order: Ordering);
    fn fetch_add(&self, v: u64, order: Ordering);
}

impl Word for std::sync::atomic::AtomicU64 {
    #[inline(always)]
    fn load(&self, order: Ordering) -> u64 {
        std::sync::atomic::AtomicU64::load(self, order)
    }
    #[inline(always)]
    fn store(&self, v: u64, order: Ordering) {
        std::sync::atomic::AtomicU64::store(self, v, order)
    }
    fn swap_if(&self, current: u64, new: u64) -> bool {
        self.compare_exchange(current, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
    fn fetch_max(&self, v: u64, order: Ordering) {
        std::sync::atomic::AtomicU64::fetch_max(self, v, order);
    }
    fn fetch_add(&self, v: u64, order: Ordering) {
        std::sync::atomic::AtomicU64::fetch_add(self, v, order);
    }
}

#[cfg(all(test, loom))]
impl Word for loom::sync::atomic::AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        loom::sync::atomic::AtomicU64::load(self, order)
    }
    fn store(&self, v: u64, order: Ordering) {
        loom::sync::atomic::AtomicU64::store(self, v, order)
    }
    fn swap_if(&self, current: u64, new: u64) -> bool {
        self.compare_exchange(current, new, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }
    fn fetch_max(&self, v: u64, order: Ordering) {
        loom::sync::atomic::AtomicU64::fetch_max(self, v, order);
    }
    fn fetch_add(&self, v: u64, order: Ordering) {
        loom::sync::atomic::AtomicU64::fetch_add(self, v, order);
    }
}
