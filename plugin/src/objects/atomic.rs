//! Atomics (`fi_atomic`): the endpoint's `fi_ops_atomic` and the datatype and
//! operation checks `fi_query_atomic` shares.

use core::ffi::{c_int, c_void};

use fabric::flags::OpFlags;
use fabric::limits::MAX_ATOMIC_SIZE;
use fabric::{AtomicMsg, AtomicOp, Context, Datatype, Error, FiAddr};

use super::{buf_or_inval, ep_or_inval, EpObj, EINVAL};
use crate::cmem::{bytes_mut, c_list, IovList};
use crate::fid::{neg, sret};
use crate::{sys, St};

/// A C datatype and operation in the core's terms (`None`: a value libfabric does not
/// define).
pub(super) fn dt_op(dt: sys::fi_datatype, op: sys::fi_op) -> Option<(Datatype, AtomicOp)> {
    let dt = u8::try_from(dt).ok().and_then(Datatype::from_raw)?;
    let op = u8::try_from(op).ok().and_then(AtomicOp::from_raw)?;
    Some((dt, op))
}

pub(super) const fn atomic_ops<S: St>() -> sys::fi_ops_atomic {
    sys::fi_ops_atomic {
        size: core::mem::size_of::<sys::fi_ops_atomic>(),
        write: Some(amo_write::<S>),
        writev: Some(amo_writev::<S>),
        writemsg: Some(amo_writemsg::<S>),
        inject: Some(amo_inject::<S>),
        readwrite: Some(amo_readwrite::<S>),
        readwritev: Some(amo_readwritev::<S>),
        readwritemsg: Some(amo_readwritemsg::<S>),
        compwrite: Some(amo_compwrite::<S>),
        compwritev: Some(amo_compwritev::<S>),
        compwritemsg: Some(amo_compwritemsg::<S>),
        writevalid: Some(amo_writevalid::<S>),
        readwritevalid: Some(amo_readwritevalid::<S>),
        compwritevalid: Some(amo_compwritevalid::<S>),
    }
}

/// The bytes of `count` elements of `dt` at `p`.
///
/// # Safety
/// As [`bytes_mut`], for `count` elements.
unsafe fn elems<'a>(p: *const c_void, count: usize, dt: Datatype) -> Option<&'a mut [u8]> {
    // SAFETY: the caller's contract.
    unsafe { bytes_mut(p as *mut c_void, count.checked_mul(dt.size())?) }
}

/// An `fi_ioc` array as byte slices of `dt` elements (results), on the stack as
/// [`c_list`] makes it.
///
/// # Safety
/// `ioc` is NULL (with `count` 0) or points to `count` iocs whose buffers are writable
/// and outlive the operation.
unsafe fn iocs<'a>(
    ioc: *const sys::fi_ioc,
    count: usize,
    dt: Datatype,
) -> Option<IovList<&'a mut [u8]>> {
    // SAFETY: the caller's contract, for the array and for each entry's buffer.
    unsafe { c_list(ioc, count, |e| elems(e.addr, e.count, dt)) }
}

/// The operand side of [`iocs`]: read-only slices.
///
/// # Safety
/// `ioc` is NULL (with `count` 0) or points to `count` iocs whose buffers are readable
/// for the call.
unsafe fn iocs_ref<'a>(
    ioc: *const sys::fi_ioc,
    count: usize,
    dt: Datatype,
) -> Option<IovList<&'a [u8]>> {
    // SAFETY: the caller's contract, for the array and for each entry's buffer.
    unsafe { c_list(ioc, count, |e| elems(e.addr, e.count, dt).map(|b| &*b)) }
}

/// The parts of a `struct fi_msg_atomic` the core takes: one operand buffer and one
/// remote segment (its `rma_iov_limit` is 1).
///
/// # Safety
/// `m` is NULL or valid, with its iocs' buffers valid.
unsafe fn amo_msg<'a>(m: *const sys::fi_msg_atomic) -> Option<AtomicMsg<'a>> {
    // SAFETY: the caller's contract.
    let m = unsafe { m.as_ref() }?;
    let (dt, op) = dt_op(m.datatype, m.op)?;
    if m.rma_iov_count != 1 || m.rma_iov.is_null() || m.iov_count > 1 {
        return None;
    }
    // SAFETY: one remote ioc by the check above and the caller's contract.
    let r = unsafe { &*m.rma_iov };
    // SAFETY: the operand ioc, if any, by the caller's contract.
    let operand = unsafe { iocs_ref(m.msg_iov, m.iov_count, dt) }?
        .first()
        .copied()
        .unwrap_or_default();
    Some(AtomicMsg {
        operand,
        addr: FiAddr(m.addr),
        remote_addr: r.addr,
        key: r.key,
        datatype: dt,
        op,
        context: Context(m.context as usize),
        data: m.data,
    })
}

/// The compare values of `count` iocs as the one buffer the core takes: the one
/// ioc's own memory, or several copied into `room` (`None` past its
/// `MAX_ATOMIC_SIZE` bytes, more than any atomic may compare).
///
/// # Safety
/// As [`iocs_ref`].
unsafe fn gathered(
    ioc: *const sys::fi_ioc,
    count: usize,
    dt: Datatype,
    room: &mut [u8; MAX_ATOMIC_SIZE],
) -> Option<&[u8]> {
    // SAFETY: the caller's contract.
    let v = unsafe { iocs_ref(ioc, count, dt) }?;
    if let [one] = *v {
        return Some(one);
    }
    let mut n = 0;
    for b in v.iter() {
        room.get_mut(n..n + b.len())?.copy_from_slice(b);
        n += b.len();
    }
    Some(&room[..n])
}

macro_rules! dt_op_or_inval {
    ($dt:expr, $op:expr) => {
        match dt_op($dt, $op) {
            Some(x) => x,
            None => return EINVAL,
        }
    };
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn amo_write<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    let (dt, op) = dt_op_or_inval!(dt, op);
    // SAFETY: fi_atomic's contract on `buf` (copied before this returns).
    let b = buf_or_inval!(unsafe { elems(buf, count, dt) });
    sret(e.ep.atomic(
        b,
        dt,
        op,
        FiAddr(dest),
        addr,
        key,
        Context(context as usize),
    ))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn amo_writev<S: St>(
    ep: *mut sys::fid_ep,
    iov: *const sys::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    let (dt, op) = dt_op_or_inval!(dt, op);
    // SAFETY: fi_atomicv's contract on the iocs.
    let v = buf_or_inval!(unsafe { iocs_ref(iov, count, dt) });
    sret(e.ep.atomicv(
        &v,
        dt,
        op,
        FiAddr(dest),
        addr,
        key,
        Context(context as usize),
    ))
}

unsafe extern "C" fn amo_writemsg<S: St>(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_atomic,
    flags: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_atomicmsg's contract on `msg`.
    let m = buf_or_inval!(unsafe { amo_msg(msg) });
    sret(e.ep.atomicmsg(&m, OpFlags::from_bits_retain(flags)))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn amo_inject<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    count: usize,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    dt: sys::fi_datatype,
    op: sys::fi_op,
) -> isize {
    let e = ep_or_inval!(ep);
    let (dt, op) = dt_op_or_inval!(dt, op);
    // SAFETY: fi_inject_atomic's contract on `buf`.
    let b = buf_or_inval!(unsafe { elems(buf, count, dt) });
    sret(e.ep.inject_atomic(b, dt, op, FiAddr(dest), addr, key))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn amo_readwrite<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    let (dt, op) = dt_op_or_inval!(dt, op);
    // FI_ATOMIC_READ takes no operand: `buf` may be NULL.
    let b = if op == AtomicOp::AtomicRead {
        &[][..]
    } else {
        // SAFETY: fi_fetch_atomic's contract on `buf`.
        buf_or_inval!(unsafe { elems(buf, count, dt) })
    };
    // SAFETY: fi_fetch_atomic's contract: `result` stays valid until completion.
    let r = buf_or_inval!(unsafe { elems(result, count, dt) });
    // SAFETY: as above.
    sret(unsafe {
        e.ep.fetch_atomic(
            b,
            r,
            dt,
            op,
            FiAddr(dest),
            addr,
            key,
            Context(context as usize),
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn amo_readwritev<S: St>(
    ep: *mut sys::fid_ep,
    iov: *const sys::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    resultv: *mut sys::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    let (dt, op) = dt_op_or_inval!(dt, op);
    // SAFETY: fi_fetch_atomicv's contract on the iocs.
    let v = buf_or_inval!(unsafe { iocs_ref(iov, count, dt) });
    // SAFETY: as above; the result buffers outlive the operation.
    let mut r = buf_or_inval!(unsafe { iocs(resultv, result_count, dt) });
    // SAFETY: as above.
    sret(unsafe {
        e.ep.fetch_atomicv(
            &v,
            &mut r,
            dt,
            op,
            FiAddr(dest),
            addr,
            key,
            Context(context as usize),
        )
    })
}

unsafe extern "C" fn amo_readwritemsg<S: St>(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_atomic,
    resultv: *mut sys::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_fetch_atomicmsg's contract on `msg`.
    let m = buf_or_inval!(unsafe { amo_msg(msg) });
    if result_count != 1 {
        return EINVAL;
    }
    // SAFETY: one result ioc, valid until completion.
    let mut r = buf_or_inval!(unsafe { iocs(resultv, 1, m.datatype) });
    // SAFETY: as above.
    sret(unsafe {
        e.ep.fetch_atomicmsg(&m, r[0], OpFlags::from_bits_retain(flags))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn amo_compwrite<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    count: usize,
    _desc: *mut c_void,
    compare: *const c_void,
    _compare_desc: *mut c_void,
    result: *mut c_void,
    _result_desc: *mut c_void,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    let (dt, op) = dt_op_or_inval!(dt, op);
    // SAFETY: fi_compare_atomic's contract on `buf`, `compare` and `result`.
    let (b, c, r) = unsafe {
        (
            elems(buf, count, dt),
            elems(compare, count, dt),
            elems(result, count, dt),
        )
    };
    let (b, c, r) = (buf_or_inval!(b), buf_or_inval!(c), buf_or_inval!(r));
    // SAFETY: `result` stays valid until completion by the same contract.
    sret(unsafe {
        e.ep.compare_atomic(
            b,
            c,
            r,
            dt,
            op,
            FiAddr(dest),
            addr,
            key,
            Context(context as usize),
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn amo_compwritev<S: St>(
    ep: *mut sys::fid_ep,
    iov: *const sys::fi_ioc,
    _desc: *mut *mut c_void,
    count: usize,
    comparev: *const sys::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut sys::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    let (dt, op) = dt_op_or_inval!(dt, op);
    // SAFETY: fi_compare_atomicv's contract on the iocs.
    let v = buf_or_inval!(unsafe { iocs_ref(iov, count, dt) });
    let mut room = [0; MAX_ATOMIC_SIZE];
    // SAFETY: as above.
    let c = buf_or_inval!(unsafe { gathered(comparev, compare_count, dt, &mut room) });
    // SAFETY: as above; the result buffers outlive the operation.
    let mut r = buf_or_inval!(unsafe { iocs(resultv, result_count, dt) });
    // SAFETY: as above.
    sret(unsafe {
        e.ep.compare_atomicv(
            &v,
            c,
            &mut r,
            dt,
            op,
            FiAddr(dest),
            addr,
            key,
            Context(context as usize),
        )
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn amo_compwritemsg<S: St>(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_atomic,
    comparev: *const sys::fi_ioc,
    _compare_desc: *mut *mut c_void,
    compare_count: usize,
    resultv: *mut sys::fi_ioc,
    _result_desc: *mut *mut c_void,
    result_count: usize,
    flags: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_compare_atomicmsg's contract on `msg`.
    let m = buf_or_inval!(unsafe { amo_msg(msg) });
    if result_count != 1 {
        return EINVAL;
    }
    let mut room = [0; MAX_ATOMIC_SIZE];
    // SAFETY: as above, for the compare and result iocs.
    let c = buf_or_inval!(unsafe { gathered(comparev, compare_count, m.datatype, &mut room) });
    // SAFETY: as above; the result buffer outlives the operation.
    let mut r = buf_or_inval!(unsafe { iocs(resultv, 1, m.datatype) });
    // SAFETY: as above.
    sret(unsafe {
        e.ep.compare_atomicmsg(&m, c, r[0], OpFlags::from_bits_retain(flags))
    })
}

/// The `*valid` queries: the most elements one call may carry, or the error.
unsafe fn valid(r: fabric::Result<usize>, count: *mut usize) -> c_int {
    match r {
        Ok(n) if !count.is_null() => {
            // SAFETY: non-NULL and writable by the queries' contract.
            unsafe { *count = n };
            0
        }
        Ok(_) => neg(Error::Inval),
        Err(e) => neg(e),
    }
}

unsafe extern "C" fn amo_writevalid<S: St>(
    ep: *mut sys::fid_ep,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let (Some(e), Some((dt, op))) = (unsafe { EpObj::<S>::state(ep) }, dt_op(dt, op)) else {
        return neg(Error::Inval);
    };
    // SAFETY: `count` by fi_atomicvalid's contract.
    unsafe { valid(e.ep.atomicvalid(dt, op), count) }
}

unsafe extern "C" fn amo_readwritevalid<S: St>(
    ep: *mut sys::fid_ep,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let (Some(e), Some((dt, op))) = (unsafe { EpObj::<S>::state(ep) }, dt_op(dt, op)) else {
        return neg(Error::Inval);
    };
    // SAFETY: `count` by fi_fetch_atomicvalid's contract.
    unsafe { valid(e.ep.fetch_atomicvalid(dt, op), count) }
}

unsafe extern "C" fn amo_compwritevalid<S: St>(
    ep: *mut sys::fid_ep,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    count: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let (Some(e), Some((dt, op))) = (unsafe { EpObj::<S>::state(ep) }, dt_op(dt, op)) else {
        return neg(Error::Inval);
    };
    // SAFETY: `count` by fi_compare_atomicvalid's contract.
    unsafe { valid(e.ep.compare_atomicvalid(dt, op), count) }
}
