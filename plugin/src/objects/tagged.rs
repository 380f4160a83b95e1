//! Tagged messages (`fi_tagged`): the endpoint's `fi_ops_tagged`.

use core::ffi::c_void;

use fabric::flags::OpFlags;
use fabric::{Context, FiAddr, TaggedMsgMut};

use super::{buf_or_inval, ep_or_inval};
use crate::cmem::{bytes, bytes_mut, gather, scatter};
use crate::fid::sret;
use crate::{sys, St};

pub(super) const fn tagged_ops<S: St>() -> sys::fi_ops_tagged {
    sys::fi_ops_tagged {
        size: core::mem::size_of::<sys::fi_ops_tagged>(),
        recv: Some(tag_recv::<S>),
        recvv: Some(tag_recvv::<S>),
        recvmsg: Some(tag_recvmsg::<S>),
        send: Some(tag_send::<S>),
        sendv: Some(tag_sendv::<S>),
        sendmsg: Some(tag_sendmsg::<S>),
        inject: Some(tag_inject::<S>),
        senddata: Some(tag_senddata::<S>),
        injectdata: Some(tag_injectdata::<S>),
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_recv<S: St>(
    ep: *mut sys::fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: sys::fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_trecv's contract: `buf` stays valid until the receive completes.
    let b = buf_or_inval!(unsafe { bytes_mut(buf, len) });
    // SAFETY: as above.
    sret(unsafe {
        e.ep.trecv(b, FiAddr(src), tag, ignore, Context(context as usize))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_recvv<S: St>(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: sys::fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_trecvv's contract on the iovecs.
    let mut v = buf_or_inval!(unsafe { scatter(iov, count) });
    // SAFETY: the buffers outlive the receive by the same contract.
    sret(unsafe {
        e.ep.trecvv(&mut v, FiAddr(src), tag, ignore, Context(context as usize))
    })
}

unsafe extern "C" fn tag_recvmsg<S: St>(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_tagged,
    flags: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: NULL or valid by fi_trecvmsg's contract.
    let m = buf_or_inval!(unsafe { msg.as_ref() });
    // SAFETY: fi_trecvmsg's contract on the iovecs.
    let mut v = buf_or_inval!(unsafe { scatter(m.msg_iov, m.iov_count) });
    let mut mm = TaggedMsgMut {
        iov: &mut v,
        addr: FiAddr(m.addr),
        tag: m.tag,
        ignore: m.ignore,
        context: Context(m.context as usize),
    };
    // SAFETY: the buffers outlive the receive by the same contract.
    sret(unsafe { e.ep.trecvmsg(&mut mm, OpFlags::from_bits_retain(flags)) })
}

unsafe extern "C" fn tag_send<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: sys::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_tsend's contract on `buf` (copied before this returns).
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.tsend(b, FiAddr(dest), tag, Context(context as usize)))
}

unsafe extern "C" fn tag_sendv<S: St>(
    ep: *mut sys::fid_ep,
    iov: *const sys::iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: sys::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_tsendv's contract on the iovecs.
    let v = buf_or_inval!(unsafe { gather(iov, count) });
    sret(e.ep.tsendv(&v, FiAddr(dest), tag, Context(context as usize)))
}

unsafe extern "C" fn tag_sendmsg<S: St>(
    ep: *mut sys::fid_ep,
    msg: *const sys::fi_msg_tagged,
    flags: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: NULL or valid by fi_tsendmsg's contract.
    let m = buf_or_inval!(unsafe { msg.as_ref() });
    // SAFETY: fi_tsendmsg's contract on the iovecs.
    let v = buf_or_inval!(unsafe { gather(m.msg_iov, m.iov_count) });
    let mm = fabric::TaggedMsg {
        iov: &v,
        addr: FiAddr(m.addr),
        tag: m.tag,
        context: Context(m.context as usize),
        data: m.data,
    };
    sret(e.ep.tsendmsg(&mm, OpFlags::from_bits_retain(flags)))
}

unsafe extern "C" fn tag_inject<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    dest: sys::fi_addr_t,
    tag: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_tinject's contract on `buf`.
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.tinject(b, FiAddr(dest), tag))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tag_senddata<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: sys::fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_tsenddata's contract on `buf`.
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.tsenddata(b, data, FiAddr(dest), tag, Context(context as usize)))
}

unsafe extern "C" fn tag_injectdata<S: St>(
    ep: *mut sys::fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: sys::fi_addr_t,
    tag: u64,
) -> isize {
    let e = ep_or_inval!(ep);
    // SAFETY: fi_tinjectdata's contract on `buf`.
    let b = buf_or_inval!(unsafe { bytes(buf, len) });
    sret(e.ep.tinjectdata(b, data, FiAddr(dest), tag))
}
