//! Ops tables for the operation families our endpoints do not offer (atomics and
//! collectives: absent from the capabilities we report): every entry returns
//! `-FI_ENOSYS`, so a program that calls them anyway gets an error, not a jump through
//! NULL.
#![allow(clippy::too_many_arguments)]

use core::ffi::{c_int, c_void};

use crate::sys::*;

const NOSYS: isize = -(FI_ENOSYS as isize);

unsafe extern "C" fn atomic_write(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: fi_addr_t,
    _: u64,
    _: u64,
    _: fi_datatype,
    _: fi_op,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_writev(
    _: *mut fid_ep,
    _: *const fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: fi_addr_t,
    _: u64,
    _: u64,
    _: fi_datatype,
    _: fi_op,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_writemsg(_: *mut fid_ep, _: *const fi_msg_atomic, _: u64) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_inject(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: fi_addr_t,
    _: u64,
    _: u64,
    _: fi_datatype,
    _: fi_op,
) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_readwrite(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: fi_addr_t,
    _: u64,
    _: u64,
    _: fi_datatype,
    _: fi_op,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_readwritev(
    _: *mut fid_ep,
    _: *const fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: *mut fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: fi_addr_t,
    _: u64,
    _: u64,
    _: fi_datatype,
    _: fi_op,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_readwritemsg(
    _: *mut fid_ep,
    _: *const fi_msg_atomic,
    _: *mut fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: u64,
) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_compwrite(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *const c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: fi_addr_t,
    _: u64,
    _: u64,
    _: fi_datatype,
    _: fi_op,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_compwritev(
    _: *mut fid_ep,
    _: *const fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: *const fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: *mut fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: fi_addr_t,
    _: u64,
    _: u64,
    _: fi_datatype,
    _: fi_op,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_compwritemsg(
    _: *mut fid_ep,
    _: *const fi_msg_atomic,
    _: *const fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: *mut fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: u64,
) -> isize {
    NOSYS
}

unsafe extern "C" fn atomic_writevalid(
    _: *mut fid_ep,
    _: fi_datatype,
    _: fi_op,
    _: *mut usize,
) -> c_int {
    NOSYS as c_int
}

unsafe extern "C" fn atomic_readwritevalid(
    _: *mut fid_ep,
    _: fi_datatype,
    _: fi_op,
    _: *mut usize,
) -> c_int {
    NOSYS as c_int
}

unsafe extern "C" fn atomic_compwritevalid(
    _: *mut fid_ep,
    _: fi_datatype,
    _: fi_op,
    _: *mut usize,
) -> c_int {
    NOSYS as c_int
}

/// Every `fi_ops_atomic` entry: `-FI_ENOSYS`.
pub static ATOMIC: fi_ops_atomic = fi_ops_atomic {
    size: core::mem::size_of::<fi_ops_atomic>(),
    write: Some(atomic_write),
    writev: Some(atomic_writev),
    writemsg: Some(atomic_writemsg),
    inject: Some(atomic_inject),
    readwrite: Some(atomic_readwrite),
    readwritev: Some(atomic_readwritev),
    readwritemsg: Some(atomic_readwritemsg),
    compwrite: Some(atomic_compwrite),
    compwritev: Some(atomic_compwritev),
    compwritemsg: Some(atomic_compwritemsg),
    writevalid: Some(atomic_writevalid),
    readwritevalid: Some(atomic_readwritevalid),
    compwritevalid: Some(atomic_compwritevalid),
};

unsafe extern "C" fn coll_barrier(_: *mut fid_ep, _: fi_addr_t, _: *mut c_void) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_broadcast(
    _: *mut fid_ep,
    _: *mut c_void,
    _: usize,
    _: *mut c_void,
    _: fi_addr_t,
    _: fi_addr_t,
    _: fi_datatype,
    _: u64,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_alltoall(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: fi_addr_t,
    _: fi_datatype,
    _: u64,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_allreduce(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: fi_addr_t,
    _: fi_datatype,
    _: fi_op,
    _: u64,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_allgather(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: fi_addr_t,
    _: fi_datatype,
    _: u64,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_reduce_scatter(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: fi_addr_t,
    _: fi_datatype,
    _: fi_op,
    _: u64,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_reduce(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: fi_addr_t,
    _: fi_addr_t,
    _: fi_datatype,
    _: fi_op,
    _: u64,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_scatter(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: fi_addr_t,
    _: fi_addr_t,
    _: fi_datatype,
    _: u64,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_gather(
    _: *mut fid_ep,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: *mut c_void,
    _: *mut c_void,
    _: fi_addr_t,
    _: fi_addr_t,
    _: fi_datatype,
    _: u64,
    _: *mut c_void,
) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_msg(
    _: *mut fid_ep,
    _: *const fi_msg_collective,
    _: *mut fi_ioc,
    _: *mut *mut c_void,
    _: usize,
    _: u64,
) -> isize {
    NOSYS
}

unsafe extern "C" fn coll_barrier2(_: *mut fid_ep, _: fi_addr_t, _: u64, _: *mut c_void) -> isize {
    NOSYS
}

/// Every `fi_ops_collective` entry: `-FI_ENOSYS`.
pub static COLL: fi_ops_collective = fi_ops_collective {
    size: core::mem::size_of::<fi_ops_collective>(),
    barrier: Some(coll_barrier),
    broadcast: Some(coll_broadcast),
    alltoall: Some(coll_alltoall),
    allreduce: Some(coll_allreduce),
    allgather: Some(coll_allgather),
    reduce_scatter: Some(coll_reduce_scatter),
    reduce: Some(coll_reduce),
    scatter: Some(coll_scatter),
    gather: Some(coll_gather),
    msg: Some(coll_msg),
    barrier2: Some(coll_barrier2),
};
