//! RMA (`fi_rma`): the endpoint's `fi_ops_rma`.

use core::ffi::c_void;

use fabric::flags::OpFlags;
use fabric::{Context, FiAddr, RmaIov, RmaMsg, RmaMsgMut};

use super::{buf_or_inval, ep_or_inval};
use crate::cmem::{bytes, bytes_mut, gather, scatter};
use crate::fid::sret;
use crate::{sys, St};

pub(super) const fn rma_ops<S: St>() -> sys::fi_ops_rma {
    sys::fi_ops_rma {
        size: core::mem::size_of::<sys::fi_ops_rma>(),
        read: Some(rma_read::<S>),
        readv: Some(rma_readv::<S>),
        readmsg: Some(rma_readmsg::<S>),
        write: Some(rma_write::<S>),
        writev: Some(rma_writev::<S>),
        writemsg: Some(rma_writemsg::<S>),
        inject: Some(rma_inject::<S>),
        writedata: Some(rma_writedata::<S>),
        injectdata: Some(rma_injectdata::<S>),
    }
}

/// The one remote segment of a `struct fi_msg_rma` (`rma_iov_limit` is 1).
///
/// # Safety
/// `iov` is NULL or points to `count` `fi_rma_iov`s.
unsafe fn one_rma_iov(iov: *const sys::fi_rma_iov, count: usize) -> Option<RmaIov> {
    if count != 1 || iov.is_null() {
        return None;
    }
    // SAFETY: one entry by the caller's contract.
    let r = unsafe { &*iov };
    Some(RmaIov {
        addr: r.addr,
        len: r.len,
        key: r.key,
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_read<S: St>(
    ep: *mut sys::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_read's contract: `buf` stays valid until the read completes.
    let b = buf_or_inval!(unsafe { bytes_mut(buf, len) });
    // SAFETY: as above.
    sret(unsafe {
        e.ep.read(b, FiAddr(src), addr, key, Context(context as usize))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_readv<S: St>(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_readv's contract on the iovecs.
    let mut v = buf_or_inval!(unsafe { scatter(iov, count) });
    // SAFETY: the buffers outlive the read by the same contract.
    sret(unsafe {
        e.ep.readv(&mut v, FiAddr(src), addr, key, Context(context as usize))
    })
}

unsafe extern "C" fn rma_readmsg<S: St>(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_rma,
    flags: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: NULL or valid by fi_readmsg's contract.
    let m = buf_or_inval!(unsafe { msg.as_ref() });
    // SAFETY: fi_readmsg's contract on the iovecs.
    let mut v = buf_or_inval!(unsafe { scatter(m.msg_iov, m.iov_count) });
    // SAFETY: as above, for the remote segments.
    let rma = buf_or_inval!(unsafe { one_rma_iov(m.rma_iov, m.rma_iov_count) });
    let mut mm = RmaMsgMut {
        iov: &mut v,
        addr: FiAddr(m.addr),
        rma_iov: rma,
        context: Context(m.context as usize),
    };
    // SAFETY: the buffers outlive the read by the same contract.
    sret(unsafe { e.ep.readmsg(&mut mm, OpFlags::from_bits_retain(flags)) })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_write<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_write's contract on `buf` (copied before this returns).
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.write(b, FiAddr(dest), addr, key, Context(context as usize)))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writev<S: St>(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_writev's contract on the iovecs.
    let v = buf_or_inval!(unsafe { gather(iov, count) });
    sret(e.ep.writev(&v, FiAddr(dest), addr, key, Context(context as usize)))
}

unsafe extern "C" fn rma_writemsg<S: St>(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_rma,
    flags: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: NULL or valid by fi_writemsg's contract.
    let m = buf_or_inval!(unsafe { msg.as_ref() });
    // SAFETY: fi_writemsg's contract on the iovecs.
    let v = buf_or_inval!(unsafe { gather(m.msg_iov, m.iov_count) });
    // SAFETY: as above, for the remote segments.
    let rma = buf_or_inval!(unsafe { one_rma_iov(m.rma_iov, m.rma_iov_count) });
    let mm = RmaMsg {
        iov: &v,
        addr: FiAddr(m.addr),
        rma_iov: rma,
        context: Context(m.context as usize),
        data: m.data,
    };
    sret(e.ep.writemsg(&mm, OpFlags::from_bits_retain(flags)))
}

unsafe extern "C" fn rma_inject<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_inject_write's contract on `buf`.
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.inject_write(b, FiAddr(dest), addr, key))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writedata<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_writedata's contract on `buf`.
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.writedata(b, data, FiAddr(dest), addr, key, Context(context as usize)))
}

unsafe extern "C" fn rma_injectdata<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: sys::fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_inject_writedata's contract on `buf`.
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.inject_writedata(b, data, FiAddr(dest), addr, key))
}
