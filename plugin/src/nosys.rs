//! The ops table for the operation family our endpoints do not offer (collectives:
//! absent from the capabilities we report): every entry returns
//! `-FI_ENOSYS`, so a program that calls them anyway gets an error, not a jump through
//! NULL.
#![allow(clippy::too_many_arguments)]

use core::ffi::c_void;

use crate::sys::*;

const NOSYS: isize = -(FI_ENOSYS as isize);

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
