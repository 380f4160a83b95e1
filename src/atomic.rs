//! Atomic-operation semantics of libfabric (`fi_atomic(3)`).
//!
//! This module knows what every `enum fi_op` does to every `enum fi_datatype`, which
//! (class, op, datatype) combinations exist (`fi_atomicvalid`, `fi_fetch_atomicvalid`,
//! `fi_compare_atomicvalid`, `fi_query_atomic`), and applies an operation element-wise
//! to target memory held as bytes. It does no locking: the transport applies it to
//! target memory it has already bounds- and key-checked, under its own exclusion.
//!
//! Which combinations are valid follows `fi_atomic(3)` for the op lists of each class
//! and libfabric's reference software implementation (`util_atomic.c`) for the
//! datatypes each op accepts, since the man page names no restriction there:
//!
//! | ops | datatypes |
//! | --- | --- |
//! | `SUM PROD LOR LAND LXOR ATOMIC_READ ATOMIC_WRITE CSWAP CSWAP_NE` | all |
//! | `MIN MAX CSWAP_LE CSWAP_LT CSWAP_GE CSWAP_GT` | integers and real floats (no complex) |
//! | `BOR BAND BXOR MSWAP` | integers |
//!
//! The 128-bit integers (`FI_INT128`, `FI_UINT128`) are integers like the others.
//! Integer arithmetic wraps. Logical ops yield `1`/`0` (`1 + 0i`/`0 + 0i` for complex,
//! where a value is true when it is not `0 + 0i`, as in C). Complex products follow C99
//! Annex G, which is what libfabric's `a * b` on `_Complex` values computes.
//!
//! `FI_LONG_DOUBLE` is the x86_64 80-bit extended format in 16 bytes of storage
//! (`FI_LONG_DOUBLE_COMPLEX`: two of them, 32 bytes). Rust has no such type and
//! going through `f64` would silently drop 11 bits of mantissa, so those values are
//! computed by a small C file compiled with the platform's real `long double`
//! (`csrc/atomic_ld.c`). On targets without that format both datatypes are reported
//! invalid (`FI_EOPNOTSUPP`) rather than computed wrongly. Computed long double
//! results are stored with their 6 padding bytes zeroed; ops that assign the operand
//! (`MIN`/`MAX` when they replace, `ATOMIC_WRITE`, compare-swaps) copy it verbatim.

use crate::error::{Error, Result};
use core::ops::{BitAnd, BitOr, BitXor, Not};

/// An atomic operation (`enum fi_op`); discriminants are libfabric's values.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AtomicOp {
    /// `FI_MIN`: `if (buf < addr) addr = buf`.
    Min = 0,
    /// `FI_MAX`: `if (buf > addr) addr = buf`.
    Max,
    /// `FI_SUM`: `addr = addr + buf`.
    Sum,
    /// `FI_PROD`: `addr = addr * buf`.
    Prod,
    /// `FI_LOR`: `addr = addr || buf`.
    Lor,
    /// `FI_LAND`: `addr = addr && buf`.
    Land,
    /// `FI_BOR`: `addr = addr | buf`.
    Bor,
    /// `FI_BAND`: `addr = addr & buf`.
    Band,
    /// `FI_LXOR`: `addr = (addr && !buf) || (!addr && buf)`.
    Lxor,
    /// `FI_BXOR`: `addr = addr ^ buf`.
    Bxor,
    /// `FI_ATOMIC_READ`: `result = addr` (fetch class only; the operand is ignored).
    AtomicRead,
    /// `FI_ATOMIC_WRITE`: `addr = buf`.
    AtomicWrite,
    /// `FI_CSWAP`: `if (compare == addr) addr = buf`.
    Cswap,
    /// `FI_CSWAP_NE`: `if (compare != addr) addr = buf`.
    CswapNe,
    /// `FI_CSWAP_LE`: `if (compare <= addr) addr = buf`.
    CswapLe,
    /// `FI_CSWAP_LT`: `if (compare < addr) addr = buf`.
    CswapLt,
    /// `FI_CSWAP_GE`: `if (compare >= addr) addr = buf`.
    CswapGe,
    /// `FI_CSWAP_GT`: `if (compare > addr) addr = buf`.
    CswapGt,
    /// `FI_MSWAP`: `addr = (buf & compare) | (addr & ~compare)`.
    Mswap,
}

impl AtomicOp {
    /// Every point-to-point op, in libfabric order (`ALL[i] as u8 == i`).
    pub const ALL: [AtomicOp; 19] = [
        AtomicOp::Min,
        AtomicOp::Max,
        AtomicOp::Sum,
        AtomicOp::Prod,
        AtomicOp::Lor,
        AtomicOp::Land,
        AtomicOp::Bor,
        AtomicOp::Band,
        AtomicOp::Lxor,
        AtomicOp::Bxor,
        AtomicOp::AtomicRead,
        AtomicOp::AtomicWrite,
        AtomicOp::Cswap,
        AtomicOp::CswapNe,
        AtomicOp::CswapLe,
        AtomicOp::CswapLt,
        AtomicOp::CswapGe,
        AtomicOp::CswapGt,
        AtomicOp::Mswap,
    ];

    /// The op with libfabric value `raw`, or `None` (e.g. for `FI_ATOMIC_OP_LAST` or
    /// the collective `FI_NOOP`, which are not point-to-point atomics).
    #[inline]
    pub const fn from_raw(raw: u8) -> Option<Self> {
        if (raw as usize) < Self::ALL.len() {
            Some(Self::ALL[raw as usize])
        } else {
            None
        }
    }

    /// The libfabric value (`enum fi_op`).
    #[inline]
    pub const fn as_raw(self) -> u8 {
        self as u8
    }

    /// Whether this is one of the compare ops (`FI_CSWAP*`, `FI_MSWAP`), which take a
    /// compare buffer.
    #[inline]
    pub const fn is_compare(self) -> bool {
        matches!(
            self,
            AtomicOp::Cswap
                | AtomicOp::CswapNe
                | AtomicOp::CswapLe
                | AtomicOp::CswapLt
                | AtomicOp::CswapGe
                | AtomicOp::CswapGt
                | AtomicOp::Mswap
        )
    }
}

/// An atomic datatype (`enum fi_datatype`); discriminants are libfabric's values.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Datatype {
    /// `FI_INT8`.
    Int8 = 0,
    /// `FI_UINT8`.
    Uint8,
    /// `FI_INT16`.
    Int16,
    /// `FI_UINT16`.
    Uint16,
    /// `FI_INT32`.
    Int32,
    /// `FI_UINT32`.
    Uint32,
    /// `FI_INT64`.
    Int64,
    /// `FI_UINT64`.
    Uint64,
    /// `FI_FLOAT`: IEEE 754 single precision.
    Float,
    /// `FI_DOUBLE`: IEEE 754 double precision.
    Double,
    /// `FI_FLOAT_COMPLEX`: real then imaginary `float`.
    FloatComplex,
    /// `FI_DOUBLE_COMPLEX`: real then imaginary `double`.
    DoubleComplex,
    /// `FI_LONG_DOUBLE`: x86_64 80-bit extended precision in 16 bytes.
    LongDouble,
    /// `FI_LONG_DOUBLE_COMPLEX`: real then imaginary long double, 32 bytes.
    LongDoubleComplex,
    /// `FI_INT128` (= `FI_DATATYPE_LAST`, 14).
    Int128,
    /// `FI_UINT128`.
    Uint128,
}

impl Datatype {
    /// Every datatype, in libfabric order (`ALL[i] as u8 == i`).
    pub const ALL: [Datatype; 16] = [
        Datatype::Int8,
        Datatype::Uint8,
        Datatype::Int16,
        Datatype::Uint16,
        Datatype::Int32,
        Datatype::Uint32,
        Datatype::Int64,
        Datatype::Uint64,
        Datatype::Float,
        Datatype::Double,
        Datatype::FloatComplex,
        Datatype::DoubleComplex,
        Datatype::LongDouble,
        Datatype::LongDoubleComplex,
        Datatype::Int128,
        Datatype::Uint128,
    ];

    /// The datatype with libfabric value `raw`, or `None` (e.g. the collective `FI_VOID`).
    #[inline]
    pub const fn from_raw(raw: u8) -> Option<Self> {
        if (raw as usize) < Self::ALL.len() {
            Some(Self::ALL[raw as usize])
        } else {
            None
        }
    }

    /// The libfabric value (`enum fi_datatype`).
    #[inline]
    pub const fn as_raw(self) -> u8 {
        self as u8
    }

    /// Size in bytes of one element (`fi_atomic_attr.size`): long double is 16 bytes of
    /// storage on x86_64, long double complex 32.
    #[inline]
    pub const fn size(self) -> usize {
        match self {
            Datatype::Int8 | Datatype::Uint8 => 1,
            Datatype::Int16 | Datatype::Uint16 => 2,
            Datatype::Int32 | Datatype::Uint32 | Datatype::Float => 4,
            Datatype::Int64 | Datatype::Uint64 | Datatype::Double | Datatype::FloatComplex => 8,
            Datatype::DoubleComplex
            | Datatype::LongDouble
            | Datatype::Int128
            | Datatype::Uint128 => 16,
            Datatype::LongDoubleComplex => 32,
        }
    }

    /// Whether this is an integer type (signed or unsigned, 8 to 128 bits).
    #[inline]
    pub const fn is_integer(self) -> bool {
        matches!(
            self,
            Datatype::Int8
                | Datatype::Uint8
                | Datatype::Int16
                | Datatype::Uint16
                | Datatype::Int32
                | Datatype::Uint32
                | Datatype::Int64
                | Datatype::Uint64
                | Datatype::Int128
                | Datatype::Uint128
        )
    }

    /// Whether this is one of the complex types.
    #[inline]
    pub const fn is_complex(self) -> bool {
        matches!(
            self,
            Datatype::FloatComplex | Datatype::DoubleComplex | Datatype::LongDoubleComplex
        )
    }

    /// Whether this build can compute on the datatype at all: long double types need
    /// the x86 80-bit format (see the module docs); everything else always can.
    #[inline]
    pub const fn is_supported(self) -> bool {
        !matches!(self, Datatype::LongDouble | Datatype::LongDoubleComplex) || cfg!(fabric_ld80)
    }
}

/// The family of atomic calls an operation is issued through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicClass {
    /// `fi_atomic*` (`fi_atomicvalid`): no result returned.
    Base,
    /// `fi_fetch_atomic*` (`fi_fetch_atomicvalid`, `FI_FETCH_ATOMIC`): returns the
    /// initial target value.
    Fetch,
    /// `fi_compare_atomic*` (`fi_compare_atomicvalid`, `FI_COMPARE_ATOMIC`): takes a
    /// compare buffer and returns the initial target value.
    Compare,
}

impl AtomicClass {
    /// The three classes.
    pub const ALL: [AtomicClass; 3] = [AtomicClass::Base, AtomicClass::Fetch, AtomicClass::Compare];

    /// Whether `op` belongs to this class's op list in `fi_atomic(3)`, regardless of
    /// datatype.
    #[inline]
    pub const fn has_op(self, op: AtomicOp) -> bool {
        match self {
            AtomicClass::Base => !op.is_compare() && !matches!(op, AtomicOp::AtomicRead),
            AtomicClass::Fetch => !op.is_compare(),
            AtomicClass::Compare => op.is_compare(),
        }
    }
}

/// Whether `op` accepts `dt`, following libfabric's reference tables (module docs).
#[inline]
const fn op_accepts(op: AtomicOp, dt: Datatype) -> bool {
    match op {
        AtomicOp::Min
        | AtomicOp::Max
        | AtomicOp::CswapLe
        | AtomicOp::CswapLt
        | AtomicOp::CswapGe
        | AtomicOp::CswapGt => !dt.is_complex(),
        AtomicOp::Bor | AtomicOp::Band | AtomicOp::Bxor | AtomicOp::Mswap => dt.is_integer(),
        AtomicOp::Sum
        | AtomicOp::Prod
        | AtomicOp::Lor
        | AtomicOp::Land
        | AtomicOp::Lxor
        | AtomicOp::AtomicRead
        | AtomicOp::AtomicWrite
        | AtomicOp::Cswap
        | AtomicOp::CswapNe => true,
    }
}

/// Whether `op` on `dt` is valid in `class` (`fi_atomicvalid`, `fi_fetch_atomicvalid`,
/// `fi_compare_atomicvalid`).
#[inline]
pub const fn is_valid(class: AtomicClass, op: AtomicOp, dt: Datatype) -> bool {
    dt.is_supported() && class.has_op(op) && op_accepts(op, dt)
}

/// The count the valid queries return: how many `dt` elements fit in `max_bytes` (the
/// provider's largest atomic), or `Err(Error::OpNotSupp)` (`-FI_EOPNOTSUPP`, as
/// `fi_atomic(3)` lists for an unsupported atomic) when the combination is invalid.
/// The count is 0 when not even one element fits.
#[inline]
pub const fn valid_count(
    class: AtomicClass,
    op: AtomicOp,
    dt: Datatype,
    max_bytes: usize,
) -> Result<usize> {
    if is_valid(class, op, dt) {
        Ok(max_bytes / dt.size())
    } else {
        Err(Error::OpNotSupp)
    }
}

/// What `fi_query_atomic` reports (`struct fi_atomic_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAttr {
    /// Elements one call may operate on, as [`valid_count`].
    pub count: usize,
    /// Bytes per element, as [`Datatype::size`].
    pub size: usize,
}

/// `fi_query_atomic`: the count and element size for a valid combination, or
/// `Err(Error::OpNotSupp)`.
#[inline]
pub const fn query(
    class: AtomicClass,
    op: AtomicOp,
    dt: Datatype,
    max_bytes: usize,
) -> Result<AtomicAttr> {
    match valid_count(class, op, dt, max_bytes) {
        Ok(count) => Ok(AtomicAttr {
            count,
            size: dt.size(),
        }),
        Err(e) => Err(e),
    }
}

/// Applies `op` element-wise to `target` (count = `target.len() / dt.size()`).
///
/// - `operand`: `count` elements (the atomic's `buf`). For `AtomicRead` it is ignored
///   and may be empty.
/// - `compare`: `count` elements for the compare class, empty otherwise.
/// - `fetch`: when `Some`, receives the values `target` held before the operation
///   (`count` elements); any class may ask for it.
///
/// Errors, checked before anything is written: `Error::OpNotSupp` when `op` on `dt` is
/// not valid in `class` ([`is_valid`]); `Error::Inval` when `target` is empty (the
/// count must be at least 1) or not a whole number of elements, or when `operand`,
/// `compare` or `fetch` does not have the length described above. Buffers may be
/// unaligned; elements are read and written in native byte order.
// Inlined for its fast path only: everything else is one call of `apply_generic`.
#[inline]
pub fn apply(
    class: AtomicClass,
    op: AtomicOp,
    dt: Datatype,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    fetch: Option<&mut [u8]>,
) -> Result<()> {
    // The commonest atomic, an add (fetching or not) of one 64-bit integer, skips the
    // generic checks and dispatch below: valid in both classes, and the same wrapping
    // sum they would compute, for the signed type too.
    if op == AtomicOp::Sum
        && matches!(dt, Datatype::Uint64 | Datatype::Int64)
        && class != AtomicClass::Compare
        && compare.is_empty()
    {
        if let (Ok(t), Ok(o)) = (
            <&mut [u8; 8]>::try_from(&mut *target),
            <&[u8; 8]>::try_from(operand),
        ) {
            match fetch {
                Some(f) if f.len() != 8 => return Err(Error::Inval),
                Some(f) => f.copy_from_slice(t),
                None => {}
            }
            *t = u64::from_ne_bytes(*t)
                .wrapping_add(u64::from_ne_bytes(*o))
                .to_ne_bytes();
            return Ok(());
        }
    }
    apply_generic(class, op, dt, target, operand, compare, fetch)
}

/// Whether [`apply`] accepts an operation on `len` target bytes with these operands
/// and a fetch buffer of `fetch` bytes: `OpNotSupp` for a combination that does not
/// exist, `Inval` for lengths that do not fit.
pub fn check(
    class: AtomicClass,
    op: AtomicOp,
    dt: Datatype,
    len: usize,
    operand: &[u8],
    compare: &[u8],
    fetch: Option<usize>,
) -> Result<()> {
    if !is_valid(class, op, dt) {
        return Err(Error::OpNotSupp);
    }
    if len == 0 || !len.is_multiple_of(dt.size()) {
        return Err(Error::Inval);
    }
    let operand_ok = match op {
        AtomicOp::AtomicRead => operand.is_empty() || operand.len() == len,
        _ => operand.len() == len,
    };
    let compare_ok = match class {
        AtomicClass::Compare => compare.len() == len,
        AtomicClass::Base | AtomicClass::Fetch => compare.is_empty(),
    };
    let fetch_ok = fetch.is_none_or(|f| f == len);
    if !(operand_ok && compare_ok && fetch_ok) {
        return Err(Error::Inval);
    }
    Ok(())
}

/// [`apply`] past its fast path.
#[inline(never)]
fn apply_generic(
    class: AtomicClass,
    op: AtomicOp,
    dt: Datatype,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    fetch: Option<&mut [u8]>,
) -> Result<()> {
    let len = target.len();
    check(
        class,
        op,
        dt,
        len,
        operand,
        compare,
        fetch.as_deref().map(<[u8]>::len),
    )?;

    // `fetch` cannot alias `target` (borrow rules), so the old values can be taken in
    // one copy before any element changes.
    if let Some(fetch) = fetch {
        fetch.copy_from_slice(target);
    }
    match op {
        AtomicOp::AtomicRead => return Ok(()),
        // A verbatim copy is exact for every datatype (and keeps long double padding
        // and NaN payloads as sent).
        AtomicOp::AtomicWrite => {
            target.copy_from_slice(operand);
            return Ok(());
        }
        _ => {}
    }

    match dt {
        Datatype::Int8 => int_apply::<i8>(op, target, operand, compare),
        Datatype::Uint8 => int_apply::<u8>(op, target, operand, compare),
        Datatype::Int16 => int_apply::<i16>(op, target, operand, compare),
        Datatype::Uint16 => int_apply::<u16>(op, target, operand, compare),
        Datatype::Int32 => int_apply::<i32>(op, target, operand, compare),
        Datatype::Uint32 => int_apply::<u32>(op, target, operand, compare),
        Datatype::Int64 => int_apply::<i64>(op, target, operand, compare),
        Datatype::Uint64 => int_apply::<u64>(op, target, operand, compare),
        Datatype::Int128 => int_apply::<i128>(op, target, operand, compare),
        Datatype::Uint128 => int_apply::<u128>(op, target, operand, compare),
        Datatype::Float => real_apply::<f32>(op, target, operand, compare),
        Datatype::Double => real_apply::<f64>(op, target, operand, compare),
        Datatype::FloatComplex => complex_apply::<f32>(op, target, operand, compare),
        Datatype::DoubleComplex => complex_apply::<f64>(op, target, operand, compare),
        #[cfg(fabric_ld80)]
        Datatype::LongDouble => ld80::apply(op, target, operand, compare),
        #[cfg(fabric_ld80)]
        Datatype::LongDoubleComplex => ld80::apply_complex(op, target, operand, compare),
        // Unreachable through `is_valid`, but an error is the safe answer regardless.
        #[cfg(not(fabric_ld80))]
        Datatype::LongDouble | Datatype::LongDoubleComplex => Err(Error::OpNotSupp),
    }
}

// ---------------------------------------------------------------------------------
// Element access and per-kind arithmetic.

/// A fixed-size element stored as native-endian bytes at any alignment.
trait Elem: Copy {
    /// Bytes per element.
    const SIZE: usize;
    /// Reads an element from exactly `SIZE` bytes.
    fn load(bytes: &[u8]) -> Self;
    /// Writes the element to exactly `SIZE` bytes.
    fn store(self, bytes: &mut [u8]);
}

/// Scalars with an order: integers (wrapping) and real floats.
trait Real: Elem + PartialOrd {
    const ZERO: Self;
    const ONE: Self;
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
}

/// Integers: the bitwise ops on top of [`Real`].
trait Int:
    Real + BitAnd<Output = Self> + BitOr<Output = Self> + BitXor<Output = Self> + Not<Output = Self>
{
}

/// Real floats: what Annex G complex multiplication needs on top of [`Real`].
trait Float: Real {
    const INFINITY: Self;
    fn sub(self, other: Self) -> Self;
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    fn copysign(self, sign: Self) -> Self;
}

macro_rules! elem_num {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = size_of::<$t>();
            #[inline]
            fn load(bytes: &[u8]) -> Self {
                let mut raw = [0u8; size_of::<$t>()];
                raw.copy_from_slice(bytes);
                <$t>::from_ne_bytes(raw)
            }
            #[inline]
            fn store(self, bytes: &mut [u8]) {
                bytes.copy_from_slice(&self.to_ne_bytes());
            }
        }
    )*};
}
elem_num!(i8, u8, i16, u16, i32, u32, i64, u64, i128, u128, f32, f64);

macro_rules! int_real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline]
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            #[inline]
            fn mul(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }
        }
        impl Int for $t {}
    )*};
}
int_real!(i8, u8, i16, u16, i32, u32, i64, u64, i128, u128);

macro_rules! float_real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline]
            fn add(self, other: Self) -> Self {
                self + other
            }
            #[inline]
            fn mul(self, other: Self) -> Self {
                self * other
            }
        }
        impl Float for $t {
            const INFINITY: Self = <$t>::INFINITY;
            #[inline]
            fn sub(self, other: Self) -> Self {
                self - other
            }
            #[inline]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline]
            fn is_infinite(self) -> bool {
                <$t>::is_infinite(self)
            }
            #[inline]
            fn copysign(self, sign: Self) -> Self {
                <$t>::copysign(self, sign)
            }
        }
    )*};
}
float_real!(f32, f64);

/// C's truth value of a scalar: non-zero (NaN counts as true, both zeros as false).
#[inline]
fn truth<T: Real>(v: T) -> bool {
    v != T::ZERO
}

#[inline]
fn from_bool<T: Real>(b: bool) -> T {
    if b {
        T::ONE
    } else {
        T::ZERO
    }
}

/// `target[i] = f(target[i], operand[i])`.
#[inline]
fn map2<T: Elem>(target: &mut [u8], operand: &[u8], f: impl Fn(T, T) -> T) {
    for (t, o) in target
        .chunks_exact_mut(T::SIZE)
        .zip(operand.chunks_exact(T::SIZE))
    {
        f(T::load(t), T::load(o)).store(t);
    }
}

/// `if cond(compare[i], target[i]) { target[i] = operand[i] }`, copying the operand
/// verbatim.
#[inline]
fn swap_if<T: Elem>(
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
    cond: impl Fn(T, T) -> bool,
) {
    for ((t, o), c) in target
        .chunks_exact_mut(T::SIZE)
        .zip(operand.chunks_exact(T::SIZE))
        .zip(compare.chunks_exact(T::SIZE))
    {
        if cond(T::load(c), T::load(t)) {
            t.copy_from_slice(o);
        }
    }
}

/// The ops shared by integers and real floats. Read/write were handled by `apply`.
fn real_apply<T: Real>(
    op: AtomicOp,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
) -> Result<()> {
    match op {
        AtomicOp::Min => map2::<T>(target, operand, |t, o| if o < t { o } else { t }),
        AtomicOp::Max => map2::<T>(target, operand, |t, o| if o > t { o } else { t }),
        AtomicOp::Sum => map2::<T>(target, operand, T::add),
        AtomicOp::Prod => map2::<T>(target, operand, T::mul),
        AtomicOp::Lor => map2::<T>(target, operand, |t, o| from_bool(truth(t) || truth(o))),
        AtomicOp::Land => map2::<T>(target, operand, |t, o| from_bool(truth(t) && truth(o))),
        AtomicOp::Lxor => map2::<T>(target, operand, |t, o| from_bool(truth(t) != truth(o))),
        AtomicOp::Cswap => swap_if::<T>(target, operand, compare, |c, t| c == t),
        AtomicOp::CswapNe => swap_if::<T>(target, operand, compare, |c, t| c != t),
        AtomicOp::CswapLe => swap_if::<T>(target, operand, compare, |c, t| c <= t),
        AtomicOp::CswapLt => swap_if::<T>(target, operand, compare, |c, t| c < t),
        AtomicOp::CswapGe => swap_if::<T>(target, operand, compare, |c, t| c >= t),
        AtomicOp::CswapGt => swap_if::<T>(target, operand, compare, |c, t| c > t),
        _ => return Err(Error::OpNotSupp),
    }
    Ok(())
}

fn int_apply<T: Int>(
    op: AtomicOp,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
) -> Result<()> {
    match op {
        AtomicOp::Bor => map2::<T>(target, operand, |t, o| t | o),
        AtomicOp::Band => map2::<T>(target, operand, |t, o| t & o),
        AtomicOp::Bxor => map2::<T>(target, operand, |t, o| t ^ o),
        AtomicOp::Mswap => {
            for ((t, o), c) in target
                .chunks_exact_mut(T::SIZE)
                .zip(operand.chunks_exact(T::SIZE))
                .zip(compare.chunks_exact(T::SIZE))
            {
                let (tv, ov, cv) = (T::load(t), T::load(o), T::load(c));
                ((ov & cv) | (tv & !cv)).store(t);
            }
        }
        _ => return real_apply::<T>(op, target, operand, compare),
    }
    Ok(())
}

/// A complex number as libfabric lays it out: real part, then imaginary part.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Complex<F> {
    re: F,
    im: F,
}

impl<F: Float> Elem for Complex<F> {
    const SIZE: usize = 2 * F::SIZE;
    #[inline]
    fn load(bytes: &[u8]) -> Self {
        let (re, im) = bytes.split_at(F::SIZE);
        Complex {
            re: F::load(re),
            im: F::load(im),
        }
    }
    #[inline]
    fn store(self, bytes: &mut [u8]) {
        let (re, im) = bytes.split_at_mut(F::SIZE);
        self.re.store(re);
        self.im.store(im);
    }
}

impl<F: Float> Complex<F> {
    /// C's truth value: anything but `0 + 0i`.
    #[inline]
    fn truth(self) -> bool {
        truth(self.re) || truth(self.im)
    }

    #[inline]
    fn from_bool(b: bool) -> Self {
        Complex {
            re: from_bool(b),
            im: F::ZERO,
        }
    }

    #[inline]
    fn add(self, o: Self) -> Self {
        Complex {
            re: self.re.add(o.re),
            im: self.im.add(o.im),
        }
    }

    /// C99 Annex G.5.1 multiplication: the textbook formula, plus recovery of
    /// infinities that it computes as NaN + NaNi (e.g. `inf * (1 + 0i)` stays
    /// infinite). GCC's `__mulsc3`/`__muldc3`, used by libfabric's `a * b`, do the same.
    fn mul(self, o: Self) -> Self {
        let (mut a, mut b, mut c, mut d) = (self.re, self.im, o.re, o.im);
        let (ac, bd, ad, bc) = (a.mul(c), b.mul(d), a.mul(d), b.mul(c));
        let mut x = ac.sub(bd);
        let mut y = ad.add(bc);
        if x.is_nan() && y.is_nan() {
            let boxed = |v: F| from_bool::<F>(v.is_infinite()).copysign(v);
            let nan_to_zero = |v: F| if v.is_nan() { F::ZERO.copysign(v) } else { v };
            let mut recalc = false;
            if a.is_infinite() || b.is_infinite() {
                a = boxed(a);
                b = boxed(b);
                c = nan_to_zero(c);
                d = nan_to_zero(d);
                recalc = true;
            }
            if c.is_infinite() || d.is_infinite() {
                c = boxed(c);
                d = boxed(d);
                a = nan_to_zero(a);
                b = nan_to_zero(b);
                recalc = true;
            }
            if !recalc
                && (ac.is_infinite() || bd.is_infinite() || ad.is_infinite() || bc.is_infinite())
            {
                a = nan_to_zero(a);
                b = nan_to_zero(b);
                c = nan_to_zero(c);
                d = nan_to_zero(d);
                recalc = true;
            }
            if recalc {
                x = F::INFINITY.mul(a.mul(c).sub(b.mul(d)));
                y = F::INFINITY.mul(a.mul(d).add(b.mul(c)));
            }
        }
        Complex { re: x, im: y }
    }
}

fn complex_apply<F: Float>(
    op: AtomicOp,
    target: &mut [u8],
    operand: &[u8],
    compare: &[u8],
) -> Result<()> {
    type C<F> = Complex<F>;
    match op {
        AtomicOp::Sum => map2::<C<F>>(target, operand, C::add),
        AtomicOp::Prod => map2::<C<F>>(target, operand, C::mul),
        AtomicOp::Lor => map2::<C<F>>(target, operand, |t, o| C::from_bool(t.truth() || o.truth())),
        AtomicOp::Land => {
            map2::<C<F>>(target, operand, |t, o| C::from_bool(t.truth() && o.truth()))
        }
        AtomicOp::Lxor => {
            map2::<C<F>>(target, operand, |t, o| C::from_bool(t.truth() != o.truth()))
        }
        // Complex equality is IEEE equality of both parts (`PartialEq` on the struct).
        AtomicOp::Cswap => swap_if::<C<F>>(target, operand, compare, |c, t| c == t),
        AtomicOp::CswapNe => swap_if::<C<F>>(target, operand, compare, |c, t| c != t),
        _ => return Err(Error::OpNotSupp),
    }
    Ok(())
}

/// Long double kernels, computed in C with the platform's 80-bit `long double`.
#[cfg(fabric_ld80)]
mod ld80 {
    use super::AtomicOp;
    use crate::error::{Error, Result};
    use core::ffi::{c_int, c_uint};

    const LD_SIZE: usize = 16;
    const CLD_SIZE: usize = 32;

    // Defined in csrc/atomic_ld.c. Each reads `count` elements from `dst`, `src` and,
    // for compare ops only, `cmp`; writes only `dst`; returns 0, or -1 (touching
    // nothing) for an op it does not implement. Pointers may be unaligned.
    unsafe extern "C" {
        fn fabric_ld_apply(
            op: c_uint,
            dst: *mut u8,
            src: *const u8,
            cmp: *const u8,
            count: usize,
        ) -> c_int;
        fn fabric_cld_apply(
            op: c_uint,
            dst: *mut u8,
            src: *const u8,
            cmp: *const u8,
            count: usize,
        ) -> c_int;
    }

    /// The lengths the C side relies on, re-checked here so the safety argument does
    /// not depend on the caller.
    #[inline]
    fn check(
        op: AtomicOp,
        target: &[u8],
        operand: &[u8],
        compare: &[u8],
        size: usize,
    ) -> Result<usize> {
        let len = target.len();
        if !len.is_multiple_of(size)
            || operand.len() != len
            || (op.is_compare() && compare.len() != len)
        {
            return Err(Error::Inval);
        }
        Ok(len / size)
    }

    type CApply = unsafe extern "C" fn(c_uint, *mut u8, *const u8, *const u8, usize) -> c_int;

    /// `long double` elements (16 bytes of storage).
    pub(super) fn apply(
        op: AtomicOp,
        target: &mut [u8],
        operand: &[u8],
        compare: &[u8],
    ) -> Result<()> {
        call(fabric_ld_apply, LD_SIZE, op, target, operand, compare)
    }

    /// `long double complex` elements (32 bytes).
    pub(super) fn apply_complex(
        op: AtomicOp,
        target: &mut [u8],
        operand: &[u8],
        compare: &[u8],
    ) -> Result<()> {
        call(fabric_cld_apply, CLD_SIZE, op, target, operand, compare)
    }

    fn call(
        f: CApply,
        size: usize,
        op: AtomicOp,
        target: &mut [u8],
        operand: &[u8],
        compare: &[u8],
    ) -> Result<()> {
        let count = check(op, target, operand, compare, size)?;
        // SAFETY: `target` and `operand` hold exactly `count` elements of `size` bytes
        // (the element size `f` works on), and `compare` does too whenever `op` is a
        // compare op, the only case in which the C code reads it; `target` is
        // exclusively borrowed and cannot overlap the shared `operand`/`compare`. The C
        // code accesses memory only through memcpy, so alignment does not matter, and it
        // keeps no pointer after returning.
        let rc = unsafe {
            f(
                c_uint::from(op.as_raw()),
                target.as_mut_ptr(),
                operand.as_ptr(),
                compare.as_ptr(),
                count,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(Error::OpNotSupp)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AtomicOp::*;
    use Datatype::*;

    // ---- An independent model: valid table, value encoding and element semantics.

    const INTS: [Datatype; 10] = [
        Int8, Uint8, Int16, Uint16, Int32, Uint32, Int64, Uint64, Int128, Uint128,
    ];
    const LD80: bool = cfg!(all(target_arch = "x86_64", not(target_env = "msvc")));

    /// The op lists of fi_atomic(3) and the datatype lists of libfabric's util_atomic.c,
    /// written out as data rather than derived from the code under test.
    fn ref_valid(class: AtomicClass, op: AtomicOp, dt: Datatype) -> bool {
        let base = [
            Min,
            Max,
            Sum,
            Prod,
            Lor,
            Land,
            Bor,
            Band,
            Lxor,
            Bxor,
            AtomicWrite,
        ];
        let fetch = [
            Min,
            Max,
            Sum,
            Prod,
            Lor,
            Land,
            Bor,
            Band,
            Lxor,
            Bxor,
            AtomicRead,
            AtomicWrite,
        ];
        let compare = [Cswap, CswapNe, CswapLe, CswapLt, CswapGe, CswapGt, Mswap];
        let in_class = match class {
            AtomicClass::Base => base.contains(&op),
            AtomicClass::Fetch => fetch.contains(&op),
            AtomicClass::Compare => compare.contains(&op),
        };
        let mut reals = INTS.to_vec();
        reals.extend([Float, Double, LongDouble]);
        let dt_ok = match op {
            Min | Max | CswapLe | CswapLt | CswapGe | CswapGt => reals.contains(&dt),
            Bor | Band | Bxor | Mswap => INTS.contains(&dt),
            _ => true,
        };
        let platform_ok = LD80 || !matches!(dt, LongDouble | LongDoubleComplex);
        in_class && dt_ok && platform_ok
    }

    #[derive(Clone, Copy, Debug)]
    enum V {
        I(i128),
        F(f64),
        C(f64, f64),
    }

    fn is_signed(dt: Datatype) -> bool {
        matches!(dt, Int8 | Int16 | Int32 | Int64 | Int128)
    }

    /// x86 80-bit extended encoding (16 bytes, zero padding) of a finite f64.
    fn f80(v: f64) -> [u8; 16] {
        let bits = v.to_bits();
        let sign = (bits >> 63) as u16;
        let exp = ((bits >> 52) & 0x7ff) as i32;
        let frac = bits & ((1u64 << 52) - 1);
        let (e, m) = if exp == 0 && frac == 0 {
            (0u16, 0u64)
        } else {
            assert!(exp != 0 && exp != 0x7ff, "test values are normal");
            ((exp - 1023 + 16383) as u16, (1u64 << 63) | (frac << 11))
        };
        f80_raw(sign, e, m)
    }

    fn f80_raw(sign: u16, exp: u16, mantissa: u64) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&mantissa.to_le_bytes());
        out[8..10].copy_from_slice(&((sign << 15) | exp).to_le_bytes());
        out
    }

    fn encode_real(dt: Datatype, v: f64) -> Vec<u8> {
        match dt {
            Float => (v as f32).to_ne_bytes().to_vec(),
            Double | DoubleComplex => v.to_ne_bytes().to_vec(),
            FloatComplex => (v as f32).to_ne_bytes().to_vec(),
            _ => f80(v).to_vec(),
        }
    }

    fn encode(dt: Datatype, v: V) -> Vec<u8> {
        match v {
            V::I(x) => {
                let mut b = x.to_le_bytes()[..dt.size()].to_vec();
                if cfg!(target_endian = "big") {
                    b.reverse();
                }
                b
            }
            V::F(x) => encode_real(dt, x),
            V::C(re, im) => {
                let mut b = encode_real(dt, re);
                b.extend(encode_real(dt, im));
                b
            }
        }
    }

    /// Decodes integers only (floats are kept as model values).
    fn decode_int(dt: Datatype, bytes: &[u8]) -> i128 {
        let mut le = bytes.to_vec();
        if cfg!(target_endian = "big") {
            le.reverse();
        }
        let fill = if is_signed(dt) && le[le.len() - 1] & 0x80 != 0 {
            0xff
        } else {
            0
        };
        let mut wide = [fill; 16];
        wide[..le.len()].copy_from_slice(&le);
        i128::from_le_bytes(wide)
    }

    fn int_cmp(dt: Datatype, a: i128, b: i128) -> core::cmp::Ordering {
        if is_signed(dt) {
            a.cmp(&b)
        } else {
            (a as u128).cmp(&(b as u128))
        }
    }

    fn b2f(b: bool) -> f64 {
        if b {
            1.0
        } else {
            0.0
        }
    }

    /// What fi_atomic(3) says one element becomes, computed on the model values.
    fn ref_elem(op: AtomicOp, dt: Datatype, t: V, o: V, c: V) -> V {
        use core::cmp::Ordering::*;
        match (t, o, c) {
            (V::I(t), V::I(o), V::I(c)) => {
                let swap = |cond: bool| V::I(if cond { o } else { t });
                match op {
                    Min => swap(int_cmp(dt, o, t) == Less),
                    Max => swap(int_cmp(dt, o, t) == Greater),
                    Sum => V::I(t.wrapping_add(o)),
                    Prod => V::I(t.wrapping_mul(o)),
                    Lor => V::I(((t != 0) || (o != 0)) as i128),
                    Land => V::I(((t != 0) && (o != 0)) as i128),
                    Lxor => V::I((((t != 0) && o == 0) || (t == 0 && (o != 0))) as i128),
                    Bor => V::I(t | o),
                    Band => V::I(t & o),
                    Bxor => V::I(t ^ o),
                    AtomicRead => V::I(t),
                    AtomicWrite => V::I(o),
                    Cswap => swap(c == t),
                    CswapNe => swap(c != t),
                    CswapLe => swap(int_cmp(dt, c, t) != Greater),
                    CswapLt => swap(int_cmp(dt, c, t) == Less),
                    CswapGe => swap(int_cmp(dt, c, t) != Less),
                    CswapGt => swap(int_cmp(dt, c, t) == Greater),
                    Mswap => V::I((o & c) | (t & !c)),
                }
            }
            (V::F(t), V::F(o), V::F(c)) => {
                let swap = |cond: bool| V::F(if cond { o } else { t });
                match op {
                    Min => swap(o < t),
                    Max => swap(o > t),
                    Sum => V::F(t + o),
                    Prod => V::F(t * o),
                    Lor => V::F(b2f(t != 0.0 || o != 0.0)),
                    Land => V::F(b2f(t != 0.0 && o != 0.0)),
                    Lxor => V::F(b2f((t != 0.0 && o == 0.0) || (t == 0.0 && o != 0.0))),
                    AtomicRead => V::F(t),
                    AtomicWrite => V::F(o),
                    Cswap => swap(c == t),
                    CswapNe => swap(c != t),
                    CswapLe => swap(c <= t),
                    CswapLt => swap(c < t),
                    CswapGe => swap(c >= t),
                    CswapGt => swap(c > t),
                    _ => panic!("no model for {op:?} on {dt:?}"),
                }
            }
            (V::C(tr, ti), V::C(or, oi), V::C(cr, ci)) => {
                let tt = tr != 0.0 || ti != 0.0;
                let ot = or != 0.0 || oi != 0.0;
                let eq = cr == tr && ci == ti;
                match op {
                    Sum => V::C(tr + or, ti + oi),
                    Prod => V::C(tr * or - ti * oi, tr * oi + ti * or),
                    Lor => V::C(b2f(tt || ot), 0.0),
                    Land => V::C(b2f(tt && ot), 0.0),
                    Lxor => V::C(b2f(tt != ot), 0.0),
                    AtomicRead => t,
                    AtomicWrite => o,
                    Cswap if eq => o,
                    CswapNe if !eq => o,
                    Cswap | CswapNe => t,
                    _ => panic!("no model for {op:?} on {dt:?}"),
                }
            }
            _ => panic!("mixed model values"),
        }
    }

    /// (target, operand, compare) element values for `dt`, chosen so that results are
    /// exact in every float format and comparisons hit <, == and > (signedness too).
    fn vectors(dt: Datatype) -> (Vec<V>, Vec<V>, Vec<V>) {
        if dt.is_integer() {
            let top = 1i128 << (dt.size() * 8 - 1);
            let t = [5, -3, 100, 0, 0x7f, -1, top];
            let o = [9, -3, -100, 0, 1, 2, top];
            let c = [5, 4, -100, 1, 0x7f, -1, 1];
            let norm = |v: &[i128]| -> Vec<V> {
                // Values as the datatype holds them (truncated, re-extended).
                v.iter()
                    .map(|&x| V::I(decode_int(dt, &encode(dt, V::I(x)))))
                    .collect()
            };
            (norm(&t), norm(&o), norm(&c))
        } else if dt.is_complex() {
            let t = [(1.5, -2.0), (0.0, 0.0), (0.0, 3.0), (2.0, 0.5)];
            let o = [(2.0, 1.0), (1.0, 0.0), (0.0, 0.0), (2.0, 0.5)];
            let c = [(1.5, -2.0), (1.0, 0.0), (0.0, 3.0), (2.0, -0.5)];
            let m = |v: &[(f64, f64)]| v.iter().map(|&(r, i)| V::C(r, i)).collect();
            (m(&t), m(&o), m(&c))
        } else {
            let t = [1.5, -2.0, 0.0, 4.0, 0.5, -0.0];
            let o = [2.5, -2.0, 3.0, 0.0, -0.25, 0.0];
            let c = [1.5, -3.0, 0.0, 8.0, 0.5, 0.0];
            let m = |v: &[f64]| v.iter().map(|&x| V::F(x)).collect();
            (m(&t), m(&o), m(&c))
        }
    }

    fn bytes(dt: Datatype, vals: &[V]) -> Vec<u8> {
        vals.iter().flat_map(|&v| encode(dt, v)).collect()
    }

    /// Copies `data` into a fresh buffer at byte offset `off`, to exercise unaligned access.
    fn at_offset(data: &[u8], off: usize) -> Vec<u8> {
        let mut v = vec![0xEEu8; off];
        v.extend_from_slice(data);
        v
    }

    // ---- Table-driven: every valid combination against the model.

    #[test]
    fn every_valid_combination_matches_model() {
        let mut checked = 0;
        for off in [0usize, 1, 3] {
            for class in AtomicClass::ALL {
                for op in AtomicOp::ALL {
                    for dt in Datatype::ALL {
                        if !ref_valid(class, op, dt) {
                            continue;
                        }
                        let (t, o, c) = vectors(dt);
                        let expect: Vec<V> = (0..t.len())
                            .map(|i| ref_elem(op, dt, t[i], o[i], c[i]))
                            .collect();
                        let t_bytes = bytes(dt, &t);
                        let o_bytes = if op == AtomicRead {
                            Vec::new()
                        } else {
                            bytes(dt, &o)
                        };
                        let c_bytes = if class == AtomicClass::Compare {
                            bytes(dt, &c)
                        } else {
                            Vec::new()
                        };
                        let mut tb = at_offset(&t_bytes, off);
                        let ob = at_offset(&o_bytes, off);
                        let cb = at_offset(&c_bytes, off);
                        let mut fb = at_offset(&vec![0xA5; t_bytes.len()], off);
                        let res = apply(
                            class,
                            op,
                            dt,
                            &mut tb[off..],
                            &ob[off..],
                            &cb[off..],
                            Some(&mut fb[off..]),
                        );
                        assert_eq!(res, Ok(()), "{class:?} {op:?} {dt:?}");
                        assert_eq!(
                            &tb[off..],
                            &bytes(dt, &expect)[..],
                            "{class:?} {op:?} {dt:?} offset {off}"
                        );
                        assert_eq!(&fb[off..], &t_bytes[..], "fetch {class:?} {op:?} {dt:?}");
                        checked += 1;
                    }
                }
            }
        }
        let valid = AtomicClass::ALL
            .iter()
            .flat_map(|&c| AtomicOp::ALL.iter().map(move |&o| (c, o)))
            .flat_map(|(c, o)| Datatype::ALL.iter().map(move |&d| (c, o, d)))
            .filter(|&(c, o, d)| ref_valid(c, o, d))
            .count();
        assert_eq!(checked, 3 * valid);
    }

    #[test]
    fn valid_table_size() {
        // Per class, ops accepting all 16 / real (13) / integer (10) datatypes:
        // base: Sum Prod Lor Land Lxor Write = 6 all, Min Max = 2 real, 3 bitwise int;
        // fetch: base + Read; compare: Cswap CswapNe all, 4 ordered real, Mswap int.
        let (all, real) = if LD80 { (16, 13) } else { (14, 12) };
        let expect = (6 * all + 2 * real + 3 * 10)
            + (7 * all + 2 * real + 3 * 10)
            + (2 * all + 4 * real + 10);
        let mut n = 0;
        for class in AtomicClass::ALL {
            for op in AtomicOp::ALL {
                for dt in Datatype::ALL {
                    assert_eq!(
                        is_valid(class, op, dt),
                        ref_valid(class, op, dt),
                        "{class:?} {op:?} {dt:?}"
                    );
                    n += usize::from(is_valid(class, op, dt));
                }
            }
        }
        assert_eq!(n, expect);
    }

    #[test]
    fn invalid_combinations_rejected_without_writing() {
        for class in AtomicClass::ALL {
            for op in AtomicOp::ALL {
                for dt in Datatype::ALL {
                    if ref_valid(class, op, dt) {
                        continue;
                    }
                    assert!(!is_valid(class, op, dt));
                    assert_eq!(valid_count(class, op, dt, 64), Err(Error::OpNotSupp));
                    assert_eq!(query(class, op, dt, 64), Err(Error::OpNotSupp));
                    let n = 2 * dt.size();
                    let mut t = vec![7u8; n];
                    let o = vec![1u8; n];
                    let c = if class == AtomicClass::Compare {
                        vec![1u8; n]
                    } else {
                        Vec::new()
                    };
                    let mut f = vec![0u8; n];
                    let r = apply(class, op, dt, &mut t, &o, &c, Some(&mut f));
                    assert_eq!(r, Err(Error::OpNotSupp), "{class:?} {op:?} {dt:?}");
                    assert!(t.iter().all(|&b| b == 7) && f.iter().all(|&b| b == 0));
                }
            }
        }
    }

    // ---- Enumerations and queries.

    #[test]
    fn raw_values_match_libfabric() {
        for (i, op) in AtomicOp::ALL.iter().enumerate() {
            assert_eq!(op.as_raw() as usize, i);
            assert_eq!(AtomicOp::from_raw(i as u8), Some(*op));
        }
        assert_eq!(AtomicOp::from_raw(19), None); // FI_ATOMIC_OP_LAST
        assert_eq!(AtomicOp::from_raw(255), None);
        assert_eq!(Mswap as u8, 18);
        assert_eq!(AtomicRead as u8, 10);
        for (i, dt) in Datatype::ALL.iter().enumerate() {
            assert_eq!(dt.as_raw() as usize, i);
            assert_eq!(Datatype::from_raw(i as u8), Some(*dt));
        }
        assert_eq!(Int128 as u8, 14);
        assert_eq!(Uint128 as u8, 15);
        assert_eq!(Datatype::from_raw(16), None);
    }

    #[test]
    fn sizes() {
        let expect = [1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 16, 32, 16, 16];
        for (dt, size) in Datatype::ALL.iter().zip(expect) {
            assert_eq!(dt.size(), size, "{dt:?}");
        }
    }

    #[test]
    fn counts_and_query() {
        assert_eq!(valid_count(AtomicClass::Base, Sum, Int32, 64), Ok(16));
        assert_eq!(
            valid_count(AtomicClass::Fetch, AtomicRead, DoubleComplex, 64),
            Ok(4)
        );
        assert_eq!(valid_count(AtomicClass::Compare, Mswap, Uint128, 40), Ok(2));
        assert_eq!(valid_count(AtomicClass::Base, Sum, Int64, 7), Ok(0));
        assert_eq!(
            valid_count(AtomicClass::Base, AtomicRead, Int64, 64),
            Err(Error::OpNotSupp)
        );
        assert_eq!(
            valid_count(AtomicClass::Fetch, Cswap, Int64, 64),
            Err(Error::OpNotSupp)
        );
        assert_eq!(
            valid_count(AtomicClass::Compare, Sum, Int64, 64),
            Err(Error::OpNotSupp)
        );
        assert_eq!(
            valid_count(AtomicClass::Base, Bor, Float, 64),
            Err(Error::OpNotSupp)
        );
        assert_eq!(
            valid_count(AtomicClass::Base, Min, FloatComplex, 64),
            Err(Error::OpNotSupp)
        );
        assert_eq!(
            valid_count(AtomicClass::Compare, Mswap, Double, 64),
            Err(Error::OpNotSupp)
        );
        assert_eq!(
            query(AtomicClass::Compare, Cswap, Double, 64),
            Ok(AtomicAttr { count: 8, size: 8 })
        );
        if LD80 {
            assert_eq!(valid_count(AtomicClass::Base, Sum, LongDouble, 64), Ok(4));
            assert_eq!(
                query(AtomicClass::Fetch, Prod, LongDoubleComplex, 64),
                Ok(AtomicAttr { count: 2, size: 32 })
            );
        }
    }

    #[test]
    fn class_op_lists() {
        assert!(AtomicClass::Base.has_op(AtomicWrite));
        assert!(!AtomicClass::Base.has_op(AtomicRead));
        assert!(AtomicClass::Fetch.has_op(AtomicRead));
        assert!(!AtomicClass::Fetch.has_op(Mswap));
        assert!(AtomicClass::Compare.has_op(CswapGt));
        assert!(!AtomicClass::Compare.has_op(AtomicWrite));
    }

    // ---- Argument validation.

    #[test]
    fn add_of_one_u64_fast_path() {
        use AtomicClass::*;
        let mut t = u64::MAX.to_ne_bytes();
        let mut f = [0u8; 8];
        let one = 1u64.to_ne_bytes();
        assert_eq!(
            apply(Fetch, Sum, Uint64, &mut t, &one, &[], Some(&mut f)),
            Ok(())
        );
        assert_eq!(
            (u64::from_ne_bytes(f), u64::from_ne_bytes(t)),
            (u64::MAX, 0)
        );
        let minus = (-5i64).to_ne_bytes();
        assert_eq!(apply(Base, Sum, Int64, &mut t, &minus, &[], None), Ok(()));
        assert_eq!(i64::from_ne_bytes(t), -5);
        // The checks of the generic path still hold.
        let e = Err(Error::Inval);
        assert_eq!(
            apply(Fetch, Sum, Uint64, &mut t, &one, &[], Some(&mut f[..4])),
            e
        );
        assert_eq!(apply(Fetch, Sum, Uint64, &mut t, &one, &one, None), e);
        assert_eq!(apply(Base, Sum, Uint64, &mut t, &one[..4], &[], None), e);
        let op = Err(Error::OpNotSupp);
        assert_eq!(apply(Compare, Sum, Uint64, &mut t, &one, &one, None), op);
        assert_eq!(i64::from_ne_bytes(t), -5, "failures write nothing");
    }

    #[test]
    fn length_mismatches_rejected() {
        use AtomicClass::*;
        let mut t = [1u8; 8];
        let o8 = [2u8; 8];
        let mut f8 = [0u8; 8];
        let e = Err(Error::Inval);
        // Empty target: count must be at least 1.
        assert_eq!(apply(Base, Sum, Uint32, &mut [], &[], &[], None), e);
        // Target not a whole number of elements.
        assert_eq!(
            apply(Base, Sum, Uint32, &mut t[..6], &o8[..6], &[], None),
            e
        );
        // Operand too short / too long.
        assert_eq!(apply(Base, Sum, Uint32, &mut t, &o8[..4], &[], None), e);
        assert_eq!(apply(Base, Sum, Uint32, &mut t[..4], &o8, &[], None), e);
        // Compare given outside the compare class, missing or short inside it.
        assert_eq!(apply(Fetch, Sum, Uint32, &mut t, &o8, &o8, None), e);
        assert_eq!(apply(Compare, Cswap, Uint32, &mut t, &o8, &[], None), e);
        assert_eq!(
            apply(Compare, Cswap, Uint32, &mut t, &o8, &o8[..4], None),
            e
        );
        // Fetch buffer of the wrong length.
        assert_eq!(
            apply(Fetch, Sum, Uint32, &mut t, &o8, &[], Some(&mut f8[..4])),
            e
        );
        // AtomicRead: a partial operand is wrong, an empty or full one is ignored.
        assert_eq!(
            apply(Fetch, AtomicRead, Uint32, &mut t, &o8[..4], &[], None),
            e
        );
        assert_eq!(t, [1u8; 8], "nothing written on error");
        assert_eq!(f8, [0u8; 8]);
        assert_eq!(
            apply(Fetch, AtomicRead, Uint32, &mut t, &[], &[], Some(&mut f8)),
            Ok(())
        );
        assert_eq!(f8, [1u8; 8]);
        assert_eq!(
            apply(Fetch, AtomicRead, Uint32, &mut t, &o8, &[], Some(&mut f8)),
            Ok(())
        );
        assert_eq!(t, [1u8; 8], "read leaves the target alone");
        // Invalid combination wins over bad lengths.
        assert_eq!(
            apply(Base, AtomicRead, Uint32, &mut t, &[], &[], None),
            Err(Error::OpNotSupp)
        );
    }

    // ---- Focused semantics.

    fn run<const N: usize>(
        class: AtomicClass,
        op: AtomicOp,
        dt: Datatype,
        target: [u8; N],
        operand: &[u8],
        compare: &[u8],
    ) -> ([u8; N], [u8; N]) {
        let mut t = target;
        let mut f = [0u8; N];
        apply(class, op, dt, &mut t, operand, compare, Some(&mut f)).expect("valid call");
        (t, f)
    }

    #[test]
    fn integer_arithmetic_wraps() {
        use AtomicClass::Base;
        assert_eq!(run(Base, Sum, Uint8, [250], &[10], &[]).0, [4]);
        assert_eq!(
            run(Base, Sum, Int8, [127], &[1], &[]).0,
            (-128i8).to_ne_bytes()
        );
        let (t, _) = run(
            Base,
            Prod,
            Uint64,
            u64::MAX.to_ne_bytes(),
            &3u64.to_ne_bytes(),
            &[],
        );
        assert_eq!(u64::from_ne_bytes(t), u64::MAX.wrapping_mul(3));
        let (t, _) = run(
            Base,
            Sum,
            Int128,
            i128::MAX.to_ne_bytes(),
            &1i128.to_ne_bytes(),
            &[],
        );
        assert_eq!(i128::from_ne_bytes(t), i128::MIN);
        let (t, _) = run(
            Base,
            Sum,
            Uint128,
            u128::MAX.to_ne_bytes(),
            &2u128.to_ne_bytes(),
            &[],
        );
        assert_eq!(u128::from_ne_bytes(t), 1);
    }

    #[test]
    fn signedness_of_min_max_and_compares() {
        use AtomicClass::*;
        // -1 < 1 as i32, but 0xffff_ffff > 1 as u32.
        let m1 = (-1i32).to_ne_bytes();
        let one = 1i32.to_ne_bytes();
        assert_eq!(run(Base, Min, Int32, one, &m1, &[]).0, m1);
        assert_eq!(run(Base, Min, Uint32, one, &m1, &[]).0, one);
        assert_eq!(run(Base, Max, Uint32, one, &m1, &[]).0, m1);
        // CSWAP_LT swaps when compare < target.
        let new = 9i32.to_ne_bytes();
        assert_eq!(run(Compare, CswapLt, Int32, one, &new, &m1).0, new);
        assert_eq!(run(Compare, CswapLt, Uint32, one, &new, &m1).0, one);
    }

    #[test]
    fn compare_direction_is_compare_op_target() {
        use AtomicClass::Compare;
        let t = 5u16.to_ne_bytes();
        let new = 77u16.to_ne_bytes();
        let c = |v: u16| v.to_ne_bytes();
        // CSWAP_LE: if (compare <= addr) addr = buf.
        assert_eq!(run(Compare, CswapLe, Uint16, t, &new, &c(4)).0, new);
        assert_eq!(run(Compare, CswapLe, Uint16, t, &new, &c(5)).0, new);
        assert_eq!(run(Compare, CswapLe, Uint16, t, &new, &c(6)).0, t);
        // CSWAP_GT: if (compare > addr) addr = buf.
        assert_eq!(run(Compare, CswapGt, Uint16, t, &new, &c(6)).0, new);
        assert_eq!(run(Compare, CswapGt, Uint16, t, &new, &c(5)).0, t);
        // CSWAP_GE / CSWAP_NE.
        assert_eq!(run(Compare, CswapGe, Uint16, t, &new, &c(5)).0, new);
        assert_eq!(run(Compare, CswapGe, Uint16, t, &new, &c(4)).0, t);
        assert_eq!(run(Compare, CswapNe, Uint16, t, &new, &c(5)).0, t);
        assert_eq!(run(Compare, CswapNe, Uint16, t, &new, &c(4)).0, new);
    }

    #[test]
    fn mswap_and_logical_ops() {
        use AtomicClass::*;
        let (t, f) = run(
            Compare,
            Mswap,
            Uint8,
            [0b1010_1010],
            &[0b0101_0101],
            &[0b0000_1111],
        );
        assert_eq!(t, [0b1010_0101]);
        assert_eq!(f, [0b1010_1010]);
        assert_eq!(run(Base, Lor, Uint8, [0], &[7], &[]).0, [1]);
        assert_eq!(run(Base, Land, Uint8, [3], &[7], &[]).0, [1]);
        assert_eq!(run(Base, Land, Uint8, [3], &[0], &[]).0, [0]);
        assert_eq!(run(Base, Lxor, Uint8, [3], &[7], &[]).0, [0]);
        assert_eq!(run(Base, Lxor, Uint8, [0], &[7], &[]).0, [1]);
        // Floats: 1.0/0.0 results, -0.0 is false and NaN is true.
        let nan = f64::NAN.to_ne_bytes();
        let nz = (-0.0f64).to_ne_bytes();
        assert_eq!(run(Base, Lor, Double, nz, &nz, &[]).0, 0.0f64.to_ne_bytes());
        assert_eq!(
            run(Base, Land, Double, nan, &2.5f64.to_ne_bytes(), &[]).0,
            1.0f64.to_ne_bytes()
        );
    }

    #[test]
    fn fetch_returns_old_values() {
        let old: Vec<u8> = [10u32, 20, 30]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let add: Vec<u8> = [1u32, 2, 3].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let mut t = old.clone();
        let mut f = vec![0u8; 12];
        apply(
            AtomicClass::Fetch,
            Sum,
            Uint32,
            &mut t,
            &add,
            &[],
            Some(&mut f),
        )
        .unwrap();
        assert_eq!(f, old);
        let new: Vec<u32> = t
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(new, [11, 22, 33]);
        // Compare class: the fetched value is the pre-swap one whether or not it swapped.
        let mut t = 5u64.to_ne_bytes();
        let mut f = [0u8; 8];
        apply(
            AtomicClass::Compare,
            Cswap,
            Uint64,
            &mut t,
            &9u64.to_ne_bytes(),
            &5u64.to_ne_bytes(),
            Some(&mut f),
        )
        .unwrap();
        assert_eq!((u64::from_ne_bytes(t), u64::from_ne_bytes(f)), (9, 5));
    }

    #[test]
    fn float_nan_and_signed_zero() {
        use AtomicClass::*;
        let one = 1.0f32.to_ne_bytes();
        let nan = f32::NAN.to_ne_bytes();
        // if (NaN < 1) is false: MIN/MAX keep the target; a NaN target is never replaced.
        assert_eq!(run(Base, Min, Float, one, &nan, &[]).0, one);
        assert_eq!(run(Base, Max, Float, nan, &one, &[]).0, nan);
        // IEEE equality: CSWAP swaps -0.0 for compare 0.0, never for NaN == NaN.
        let nz = (-0.0f32).to_ne_bytes();
        assert_eq!(
            run(Compare, Cswap, Float, nz, &one, &0.0f32.to_ne_bytes()).0,
            one
        );
        assert_eq!(run(Compare, Cswap, Float, nan, &one, &nan).0, nan);
        assert_eq!(run(Compare, CswapNe, Float, nan, &one, &nan).0, one);
    }

    fn cplx32(re: f32, im: f32) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[..4].copy_from_slice(&re.to_ne_bytes());
        b[4..].copy_from_slice(&im.to_ne_bytes());
        b
    }

    fn cplx64(re: f64, im: f64) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&re.to_ne_bytes());
        b[8..].copy_from_slice(&im.to_ne_bytes());
        b
    }

    fn parts64(b: [u8; 16]) -> (f64, f64) {
        let re = f64::from_ne_bytes(b[..8].try_into().unwrap());
        let im = f64::from_ne_bytes(b[8..].try_into().unwrap());
        (re, im)
    }

    #[test]
    fn complex_sum_prod_and_logic() {
        use AtomicClass::*;
        assert_eq!(
            run(
                Base,
                Sum,
                FloatComplex,
                cplx32(1.5, -2.0),
                &cplx32(0.25, 4.0),
                &[]
            )
            .0,
            cplx32(1.75, 2.0)
        );
        // (1 + 2i)(3 - 4i) = 3 - 4i + 6i + 8 = 11 + 2i
        assert_eq!(
            run(
                Base,
                Prod,
                FloatComplex,
                cplx32(1.0, 2.0),
                &cplx32(3.0, -4.0),
                &[]
            )
            .0,
            cplx32(11.0, 2.0)
        );
        assert_eq!(
            run(
                Base,
                Prod,
                DoubleComplex,
                cplx64(0.0, 1.0),
                &cplx64(0.0, 1.0),
                &[]
            )
            .0,
            cplx64(-1.0, 0.0)
        );
        // 0 + 3i is true; 0 + 0i false; results are 1 + 0i / 0 + 0i.
        assert_eq!(
            run(
                Base,
                Land,
                DoubleComplex,
                cplx64(0.0, 3.0),
                &cplx64(-2.0, 0.0),
                &[]
            )
            .0,
            cplx64(1.0, 0.0)
        );
        assert_eq!(
            run(
                Base,
                Lxor,
                DoubleComplex,
                cplx64(0.0, 3.0),
                &cplx64(-2.0, 0.0),
                &[]
            )
            .0,
            cplx64(0.0, 0.0)
        );
        // CSWAP compares both parts.
        let t = cplx64(1.0, 2.0);
        let new = cplx64(5.0, 5.0);
        assert_eq!(
            run(Compare, Cswap, DoubleComplex, t, &new, &cplx64(1.0, 2.0)).0,
            new
        );
        assert_eq!(
            run(Compare, Cswap, DoubleComplex, t, &new, &cplx64(1.0, -2.0)).0,
            t
        );
        assert_eq!(
            run(Compare, CswapNe, DoubleComplex, t, &new, &cplx64(1.0, -2.0)).0,
            new
        );
    }

    #[test]
    fn complex_prod_recovers_infinities_like_c() {
        use AtomicClass::Base;
        let inf = f64::INFINITY;
        // Textbook formula gives NaN + NaNi; Annex G gives inf + inf i.
        let (re, im) = parts64(
            run(
                Base,
                Prod,
                DoubleComplex,
                cplx64(inf, inf),
                &cplx64(1.0, 0.0),
                &[],
            )
            .0,
        );
        assert_eq!((re, im), (inf, inf));
        // (inf + 0i)(NaN + i): only the real part is NaN, so no recovery is needed.
        let (re, im) = parts64(
            run(
                Base,
                Prod,
                DoubleComplex,
                cplx64(inf, 0.0),
                &cplx64(f64::NAN, 1.0),
                &[],
            )
            .0,
        );
        assert!(re.is_nan());
        assert_eq!(im, inf);
        // (inf + NaN i)(1 + 0i): both parts NaN by the formula; recovery gives inf real.
        let (re, _) = parts64(
            run(
                Base,
                Prod,
                DoubleComplex,
                cplx64(inf, f64::NAN),
                &cplx64(1.0, 0.0),
                &[],
            )
            .0,
        );
        assert_eq!(re, inf);
        let (t, _) = run(
            Base,
            Prod,
            FloatComplex,
            cplx32(f32::INFINITY, f32::INFINITY),
            &cplx32(1.0, 0.0),
            &[],
        );
        assert_eq!(t, cplx32(f32::INFINITY, f32::INFINITY));
        // A genuine NaN stays NaN.
        let (re, im) = parts64(
            run(
                Base,
                Prod,
                DoubleComplex,
                cplx64(f64::NAN, 0.0),
                &cplx64(1.0, 1.0),
                &[],
            )
            .0,
        );
        assert!(re.is_nan() && im.is_nan());
    }

    #[test]
    fn unaligned_buffers() {
        // Values straddle every alignment; the result must not depend on the offset.
        for off in 0..16 {
            let mut t = vec![0u8; off + 32];
            let mut o = vec![0u8; off + 32];
            let mut c = vec![0u8; off + 32];
            let mut f = vec![0u8; off + 32];
            t[off..off + 16].copy_from_slice(&100u128.to_ne_bytes());
            t[off + 16..].copy_from_slice(&(-7i128).to_ne_bytes());
            o[off..off + 16].copy_from_slice(&1u128.to_ne_bytes());
            o[off + 16..].copy_from_slice(&1u128.to_ne_bytes());
            c[off..off + 16].copy_from_slice(&100u128.to_ne_bytes());
            c[off + 16..].copy_from_slice(&0u128.to_ne_bytes());
            apply(
                AtomicClass::Compare,
                Cswap,
                Int128,
                &mut t[off..],
                &o[off..],
                &c[off..],
                Some(&mut f[off..]),
            )
            .unwrap();
            assert_eq!(i128::from_ne_bytes(t[off..off + 16].try_into().unwrap()), 1);
            assert_eq!(i128::from_ne_bytes(t[off + 16..].try_into().unwrap()), -7);
            assert_eq!(
                i128::from_ne_bytes(f[off..off + 16].try_into().unwrap()),
                100
            );
            assert_eq!(i128::from_ne_bytes(f[off + 16..].try_into().unwrap()), -7);
        }
    }

    // ---- Long double, computed by C in 80-bit precision.

    /// 1 + 2^-k as an 80-bit extended value (k <= 63): not representable in f64 for k > 52.
    #[cfg(fabric_ld80)]
    fn one_plus_pow2(k: u32) -> [u8; 16] {
        f80_raw(0, 16383, (1u64 << 63) | (1u64 << (63 - k)))
    }

    #[cfg(fabric_ld80)]
    fn pow2(k: i32) -> [u8; 16] {
        f80_raw(0, (16383 + k) as u16, 1u64 << 63)
    }

    #[cfg(fabric_ld80)]
    #[test]
    fn long_double_keeps_80_bit_precision() {
        use AtomicClass::*;
        // (1 + 2^-60) + 2^-60 = 1 + 2^-59; through f64 both would round to 1.
        let (t, f) = run(Base, Sum, LongDouble, one_plus_pow2(60), &pow2(-60), &[]);
        assert_eq!(t, one_plus_pow2(59));
        assert_eq!(f, one_plus_pow2(60));
        // MIN: 1 + 2^-61 < 1 + 2^-60 (equal in f64).
        assert_eq!(
            run(
                Base,
                Min,
                LongDouble,
                one_plus_pow2(60),
                &one_plus_pow2(61),
                &[]
            )
            .0,
            one_plus_pow2(61)
        );
        assert_eq!(
            run(
                Base,
                Max,
                LongDouble,
                one_plus_pow2(60),
                &one_plus_pow2(61),
                &[]
            )
            .0,
            one_plus_pow2(60)
        );
        // CSWAP sees the difference too.
        let new = f80(42.0);
        assert_eq!(
            run(
                Compare,
                Cswap,
                LongDouble,
                one_plus_pow2(60),
                &new,
                &one_plus_pow2(61)
            )
            .0,
            one_plus_pow2(60)
        );
        assert_eq!(
            run(
                Compare,
                Cswap,
                LongDouble,
                one_plus_pow2(60),
                &new,
                &one_plus_pow2(60)
            )
            .0,
            new
        );
        assert_eq!(
            run(
                Compare,
                CswapLt,
                LongDouble,
                one_plus_pow2(60),
                &new,
                &one_plus_pow2(61)
            )
            .0,
            new
        );
        // (1 + 2^-30)^2 = 1 + 2^-29 + 2^-60, exact in 64 mantissa bits.
        let sq = f80_raw(0, 16383, (1u64 << 63) | (1u64 << 34) | (1u64 << 3));
        assert_eq!(
            run(
                Base,
                Prod,
                LongDouble,
                one_plus_pow2(30),
                &one_plus_pow2(30),
                &[]
            )
            .0,
            sq
        );
    }

    #[cfg(fabric_ld80)]
    #[test]
    fn long_double_results_have_zero_padding() {
        let mut t = f80(1.5);
        t[10..].fill(0xCC);
        let (r, f) = run(AtomicClass::Base, Sum, LongDouble, t, &f80(2.0), &[]);
        assert_eq!(r, f80(3.5));
        assert_eq!(f, t, "fetch returns the bytes as they were");
        // Logical results are 1.0 / 0.0.
        assert_eq!(
            run(
                AtomicClass::Base,
                Lor,
                LongDouble,
                f80(0.0),
                &f80(-3.0),
                &[]
            )
            .0,
            f80(1.0)
        );
        assert_eq!(
            run(
                AtomicClass::Base,
                Land,
                LongDouble,
                f80(0.0),
                &f80(-3.0),
                &[]
            )
            .0,
            f80(0.0)
        );
    }

    #[cfg(fabric_ld80)]
    fn cld(re: [u8; 16], im: [u8; 16]) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..16].copy_from_slice(&re);
        b[16..].copy_from_slice(&im);
        b
    }

    #[cfg(fabric_ld80)]
    #[test]
    fn long_double_complex_sum_prod() {
        use AtomicClass::*;
        // (1 + 2^-60 + i) + (2^-60 + 2i) = (1 + 2^-59) + 3i
        let (t, _) = run(
            Base,
            Sum,
            LongDoubleComplex,
            cld(one_plus_pow2(60), f80(1.0)),
            &cld(pow2(-60), f80(2.0)),
            &[],
        );
        assert_eq!(t, cld(one_plus_pow2(59), f80(3.0)));
        // (1 + 2^-60 + i)(1 + i) = 2^-60 + (2 + 2^-60)i
        let (t, _) = run(
            Base,
            Prod,
            LongDoubleComplex,
            cld(one_plus_pow2(60), f80(1.0)),
            &cld(f80(1.0), f80(1.0)),
            &[],
        );
        let two_plus = f80_raw(0, 16384, (1u64 << 63) | (1u64 << 2));
        assert_eq!(t, cld(pow2(-60), two_plus));
        // CSWAP compares both 80-bit parts.
        let target = cld(one_plus_pow2(60), f80(1.0));
        let new = cld(f80(7.0), f80(7.0));
        assert_eq!(
            run(
                Compare,
                Cswap,
                LongDoubleComplex,
                target,
                &new,
                &cld(one_plus_pow2(61), f80(1.0))
            )
            .0,
            target
        );
        assert_eq!(
            run(
                Compare,
                CswapNe,
                LongDoubleComplex,
                target,
                &new,
                &cld(one_plus_pow2(61), f80(1.0))
            )
            .0,
            new
        );
        // Annex G in C agrees with the Rust path on infinities.
        let inf = f80_raw(0, 0x7fff, 1u64 << 63);
        let (t, _) = run(
            Base,
            Prod,
            LongDoubleComplex,
            cld(inf, inf),
            &cld(f80(1.0), f80(0.0)),
            &[],
        );
        assert_eq!(t, cld(inf, inf));
    }

    #[cfg(not(fabric_ld80))]
    #[test]
    fn long_double_unsupported_here() {
        for class in AtomicClass::ALL {
            for op in AtomicOp::ALL {
                assert!(!is_valid(class, op, LongDouble));
                assert!(!is_valid(class, op, LongDoubleComplex));
            }
        }
        let mut t = [0u8; 16];
        let r = apply(
            AtomicClass::Base,
            Sum,
            LongDouble,
            &mut t,
            &[0u8; 16],
            &[],
            None,
        );
        assert_eq!(r, Err(Error::OpNotSupp));
    }
}
