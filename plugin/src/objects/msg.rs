//! Messages (`fi_msg`): the endpoint's `fi_ops_msg`.

use core::ffi::c_void;

use fabric::flags::OpFlags;
use fabric::{Context, FiAddr};

use super::{buf_or_inval, ep_or_inval};
use crate::cmem::{bytes, bytes_mut, gather, scatter};
use crate::fid::sret;
use crate::{sys, St};

pub(super) const fn msg_ops<S: St>() -> sys::fi_ops_msg {
    sys::fi_ops_msg {
        size: core::mem::size_of::<sys::fi_ops_msg>(),
        recv: Some(msg_recv::<S>),
        recvv: Some(msg_recvv::<S>),
        recvmsg: Some(msg_recvmsg::<S>),
        send: Some(msg_send::<S>),
        sendv: Some(msg_sendv::<S>),
        sendmsg: Some(msg_sendmsg::<S>),
        inject: Some(msg_inject::<S>),
        senddata: Some(msg_senddata::<S>),
        injectdata: Some(msg_injectdata::<S>),
    }
}

unsafe extern "C" fn msg_recv<S: St>(
    ep: *mut sys::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: sys::fi_addr_t,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_recv's contract: `buf` stays valid until the receive completes.
    let b = buf_or_inval!(unsafe { bytes_mut(buf, len) });
    // SAFETY: as above, the contract `Endpoint::recv` asks of its caller.
    sret(unsafe { e.ep.recv(b, FiAddr(src), Context(context as usize)) })
}

unsafe extern "C" fn msg_recvv<S: St>(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: sys::fi_addr_t,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_recvv's contract on the iovecs.
    let mut v = buf_or_inval!(unsafe { scatter(iov, count) });
    // SAFETY: the buffers outlive the receive by the same contract.
    sret(unsafe { e.ep.recvv(&mut v, FiAddr(src), Context(context as usize)) })
}

unsafe extern "C" fn msg_recvmsg<S: St>(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg,
    flags: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: NULL or valid by fi_recvmsg's contract.
    let m = buf_or_inval!(unsafe { msg.as_ref() });
    // SAFETY: fi_recvmsg's contract on the iovecs.
    let mut v = buf_or_inval!(unsafe { scatter(m.msg_iov, m.iov_count) });
    let mut mm = fabric::MsgMut {
        iov: &mut v,
        addr: FiAddr(m.addr),
        context: Context(m.context as usize),
    };
    // SAFETY: the buffers outlive the receive by the same contract.
    sret(unsafe { e.ep.recvmsg(&mut mm, OpFlags::from_bits_retain(flags)) })
}

unsafe extern "C" fn msg_send<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: sys::fi_addr_t,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_send's contract on `buf` (copied before this returns).
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.send(b, FiAddr(dest), Context(context as usize)))
}

unsafe extern "C" fn msg_sendv<S: St>(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: sys::fi_addr_t,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_sendv's contract on the iovecs.
    let v = buf_or_inval!(unsafe { gather(iov, count) });
    sret(e.ep.sendv(&v, FiAddr(dest), Context(context as usize)))
}

unsafe extern "C" fn msg_sendmsg<S: St>(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg,
    flags: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: NULL or valid by fi_sendmsg's contract.
    let m = buf_or_inval!(unsafe { msg.as_ref() });
    // SAFETY: fi_sendmsg's contract on the iovecs.
    let v = buf_or_inval!(unsafe { gather(m.msg_iov, m.iov_count) });
    let mm = fabric::Msg {
        iov: &v,
        addr: FiAddr(m.addr),
        context: Context(m.context as usize),
        data: m.data,
    };
    sret(e.ep.sendmsg(&mm, OpFlags::from_bits_retain(flags)))
}

unsafe extern "C" fn msg_inject<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: sys::fi_addr_t,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_inject's contract on `buf`.
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.inject(b, FiAddr(dest)))
}

unsafe extern "C" fn msg_senddata<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: sys::fi_addr_t,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_senddata's contract on `buf`.
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.senddata(b, data, FiAddr(dest), Context(context as usize)))
}

unsafe extern "C" fn msg_injectdata<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: sys::fi_addr_t,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_injectdata's contract on `buf`.
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.injectdata(b, data, FiAddr(dest)))
}
