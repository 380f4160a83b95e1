//! Seeing a slice of a generic entry type as a slice of a concrete one when the two are
//! the same type, which the trait objects of this layer cannot express with bounds: a
//! stack's CQ is generic over its format, and the tagged stacks can then be read
//! straight into the caller's tagged entries instead of through a converting copy.
#![allow(unsafe_code)] // one pointer cast between identical types, checked by `TypeId`

use core::any::TypeId;

/// `s` as a `[U]` when `T` is `U`, `None` otherwise. The test is between two constants,
/// so each instantiation compiles to one of the two answers.
#[inline(always)]
pub(crate) fn same_slice_mut<T: 'static, U: 'static>(s: &mut [T]) -> Option<&mut [U]> {
    if TypeId::of::<T>() == TypeId::of::<U>() {
        let len = s.len();
        // SAFETY: `T` and `U` are the same type (equal `TypeId`s), so the pointer and
        // length describe the same `len` valid, aligned, initialized elements, borrowed
        // mutably for the lifetime of `s` and by nothing else meanwhile.
        Some(unsafe { core::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<U>(), len) })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn casts_between_identical_types_only() {
        let mut a = [1u64, 2, 3];
        let b = same_slice_mut::<u64, u64>(&mut a).map(|s| {
            s[1] = 7;
            s.len()
        });
        assert_eq!((b, a), (Some(3), [1, 7, 3]));
        assert!(same_slice_mut::<u64, i64>(&mut a).is_none());
        assert!(same_slice_mut::<u64, [u32; 2]>(&mut a).is_none());
    }
}
