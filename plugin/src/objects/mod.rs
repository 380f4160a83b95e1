//! The objects of one stack `S`: domain, endpoint, CQ, AV and MR, with ops tables whose
//! entries are `extern "C"` functions monomorphized for `S` (and, for CQ reads, for the
//! C entry format). A call from C is one indirect call into the static stack's path.

pub(crate) mod pollset;
pub(crate) mod waitset;

use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr;
use std::time::Duration;

use fabric::attr::{AvAttr, AvKind, CntrAttr, CqAttr, CqFormatKind, CqWaitCond, MrAttr, WaitObj};
use fabric::av_type::AvType;
use fabric::flags::{BindFlags, MrAccess, OpFlags};
use fabric::info::Info;
use fabric::limits::MAX_ATOMIC_SIZE;
use fabric::{
    AddressVector, AtomicClass, AtomicMsg, AtomicOp, Config, Context, Counter, Cq, CqDataEntry,
    CqEntry, CqMsgEntry, CqTaggedEntry, Datatype, Domain, Endpoint, EpOpt, EpOptName, Error,
    Fabric, FiAddr, MemoryRegion, RmaIov, RmaMsg, RmaMsgMut, TaggedMsgMut,
};

use crate::cmem::{
    bytes, bytes_mut, c_list, copy_out, gather, iovs, scatter, strerror_into, IovList,
};
use crate::fid::{neg, no_bind, no_control, no_ops_open, ret, sret, Holds, Obj, Refs};
use crate::sys;
use crate::{Exposed, St};
use waitset::InSet;

/// A domain of stack `S`, with the fabric the core opens alongside it.
pub struct DomainState<S: St> {
    domain: Domain<S>,
    _fabric: Fabric<S>,
    info: Info,
    refs: Refs,
    holds: Holds,
}

/// An endpoint.
pub struct EpState<S: St> {
    ep: Endpoint<S>,
    holds: Holds,
}

/// A completion queue.
pub struct CqState<S: St> {
    pub(crate) cq: Cq<S>,
    pub(crate) refs: Refs,
    pub(crate) holds: Holds,
    /// Its place in a wait set (`FI_WAIT_SET`), left when it closes.
    _set: Option<InSet<S>>,
}

/// A counter.
pub struct CntrState<S: Config> {
    pub(crate) cntr: Counter<S>,
    pub(crate) refs: Refs,
    pub(crate) holds: Holds,
    /// Its place in a wait set (`FI_WAIT_SET`), left when it closes.
    _set: Option<InSet<S>>,
}

/// An address vector.
pub struct AvState<S: St> {
    av: AddressVector<S>,
    refs: Refs,
    holds: Holds,
}

/// A memory region: C owns the memory and promises it outlives the registration.
pub struct MrState<S: St> {
    _mr: MemoryRegion<'static, S>,
    holds: Holds,
}

type DomainObj<S> = Obj<sys::fid_domain, DomainState<S>>;
type EpObj<S> = Obj<sys::fid_ep, EpState<S>>;
type CqObj<S> = Obj<sys::fid_cq, CqState<S>>;
type AvObj<S> = Obj<sys::fid_av, AvState<S>>;
type CntrObj<S> = Obj<sys::fid_cntr, CntrState<S>>;
type MrObj<S> = Obj<sys::fid_mr, MrState<S>>;

fn fid(class: u32, context: *mut c_void, ops: &'static sys::fi_ops) -> sys::fid {
    sys::fid {
        fclass: class as usize,
        context,
        ops: ops as *const sys::fi_ops as *mut sys::fi_ops,
    }
}

fn ptr_of<T>(t: &'static T) -> *mut T {
    t as *const T as *mut T
}

const EINVAL: isize = -(sys::FI_EINVAL as isize);

// ---- domain -------------------------------------------------------------------------

/// Opens the core fabric and domain of stack `S` for `info` and returns the C domain.
///
/// # Safety
/// `parent` is the live fabric's reference count, open until this domain closes.
pub unsafe fn open_domain<S: St>(
    info: Info,
    parent: &Refs,
    context: *mut c_void,
) -> fabric::Result<*mut sys::fid_domain> {
    let fabric = Fabric::<S>::open(&info)?;
    let domain = fabric.domain(&info)?;
    let st = DomainState {
        domain,
        _fabric: fabric,
        info,
        refs: Refs::default(),
        holds: Holds::default(),
    };
    st.holds.add(parent);
    let hdr = sys::fid_domain {
        fid: fid(
            sys::FI_CLASS_DOMAIN,
            context,
            const { &domain_fi_ops::<S>() },
        ),
        ops: ptr_of(const { &domain_ops::<S>() }),
        mr: ptr_of(const { &mr_ops::<S>() }),
    };
    Ok(DomainObj::<S>::create(hdr, st, sys::FI_CLASS_DOMAIN).cast())
}

const fn domain_fi_ops<S: St>() -> sys::fi_ops {
    sys::fi_ops {
        size: core::mem::size_of::<sys::fi_ops>(),
        close: Some(domain_close::<S>),
        bind: Some(no_bind),
        control: Some(no_control),
        ops_open: Some(no_ops_open),
        tostr: None,
        ops_set: None,
    }
}

/// The core domain behind domain handle `d` of stack `S`, and its count of dependents.
///
/// # Safety
/// As [`Obj::state`]: `d` is NULL or a domain of stack `S` (its ops table's call).
pub(crate) unsafe fn domain_of<'a, S: St>(
    d: *mut sys::fid_domain,
) -> Option<(&'a Domain<S>, &'a Refs)> {
    // SAFETY: the caller's contract.
    unsafe { DomainObj::<S>::state(d) }.map(|s| (&s.domain, &s.refs))
}

unsafe extern "C" fn domain_close<S: St>(f: *mut sys::fid) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { DomainObj::<S>::close(f, |s| s.refs.busy(), |s| s.holds.release()) }
}

const fn domain_ops<S: St>() -> sys::fi_ops_domain {
    sys::fi_ops_domain {
        size: core::mem::size_of::<sys::fi_ops_domain>(),
        av_open: Some(av_open::<S>),
        cq_open: Some(cq_open::<S>),
        endpoint: Some(ep_open::<S>),
        scalable_ep: Some(no_scalable_ep),
        cntr_open: Some(cntr_open::<S>),
        poll_open: Some(pollset::poll_open::<S>),
        stx_ctx: Some(no_stx_ctx),
        srx_ctx: Some(no_srx_ctx),
        query_atomic: Some(query_atomic::<S>),
        query_collective: None,
        endpoint2: None,
    }
}

unsafe extern "C" fn no_scalable_ep(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_info,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn no_stx_ctx(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_tx_attr,
    _: *mut *mut sys::fid_stx,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn no_srx_ctx(
    _: *mut sys::fid_domain,
    _: *mut sys::fi_rx_attr,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn query_atomic<S: St>(
    d: *mut sys::fid_domain,
    dt: sys::fi_datatype,
    op: sys::fi_op,
    attr: *mut sys::fi_atomic_attr,
    flags: u64,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    let class = match flags {
        0 => AtomicClass::Base,
        sys::FI_FETCH_ATOMIC => AtomicClass::Fetch,
        sys::FI_COMPARE_ATOMIC => AtomicClass::Compare,
        _ => return neg(Error::BadFlags),
    };
    let (Some((dt, op)), false) = (dt_op(dt, op), attr.is_null()) else {
        return neg(Error::Inval);
    };
    match dom.domain.query_atomic(class, op, dt) {
        Ok(count) => {
            // SAFETY: `attr` is non-NULL and writable by fi_query_atomic's contract.
            unsafe {
                (*attr).count = count;
                (*attr).size = dt.size();
            }
            0
        }
        Err(e) => neg(e),
    }
}

// ---- completion queues ----------------------------------------------------------------

/// A C completion entry format: built from the tagged entry every stack stores.
pub trait CEntry: Copy {
    /// True for the tagged entry itself, read straight into C's buffer.
    const DIRECT: bool = false;
    /// The format's entry for `e`.
    fn from_tagged(e: &CqTaggedEntry) -> Self;
}

impl CEntry for CqEntry {
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        CqEntry {
            op_context: e.op_context,
        }
    }
}
impl CEntry for CqMsgEntry {
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        CqMsgEntry {
            op_context: e.op_context,
            flags: e.flags,
            len: e.len,
        }
    }
}
impl CEntry for CqDataEntry {
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        CqDataEntry {
            op_context: e.op_context,
            flags: e.flags,
            len: e.len,
            buf: e.buf,
            data: e.data,
        }
    }
}
impl CEntry for CqTaggedEntry {
    const DIRECT: bool = true;
    #[inline]
    fn from_tagged(e: &CqTaggedEntry) -> Self {
        *e
    }
}

unsafe extern "C" fn cq_open<S: St>(
    d: *mut sys::fid_domain,
    attr: *mut sys::fi_cq_attr,
    out: *mut *mut sys::fid_cq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: NULL or a valid attribute by fi_cq_open's contract.
    let (Some(a), false) = (unsafe { attr.as_ref() }, out.is_null()) else {
        return neg(Error::Inval);
    };
    let Some(format) = CqFormatKind::from_raw(a.format) else {
        return neg(Error::Inval);
    };
    let (Some(wait_obj), Some(wait_cond)) = (
        WaitObj::from_raw(a.wait_obj),
        CqWaitCond::from_raw(a.wait_cond),
    ) else {
        return neg(Error::Inval);
    };
    if a.flags & !(sys::FI_AFFINITY as u64) != 0 {
        return neg(Error::BadFlags);
    }
    // fi_cq(3): `wait_set` is ignored unless the wait object is FI_WAIT_SET.
    let set = match wait_obj {
        WaitObj::Set => match waitset::lookup(a.wait_set) {
            Some(w) => Some(w),
            None => return neg(Error::Inval),
        },
        _ => None,
    };
    let ca = CqAttr {
        size: a.size,
        flags: 0,
        format,
        wait_obj,
        signaling_vector: a.signaling_vector,
        wait_cond,
    };
    let r = match set {
        Some(w) => w.cq(&dom.domain, &ca).map(|(c, s)| (c, Some(s))),
        None => dom.domain.cq(&ca).map(|c| (c, None)),
    };
    let (cq, in_set) = match r {
        Ok(c) => c,
        Err(e) => return neg(e),
    };
    let ops: &'static sys::fi_ops_cq = match format {
        CqFormatKind::Context => const { &cq_ops::<S, CqEntry>() },
        CqFormatKind::Msg => const { &cq_ops::<S, CqMsgEntry>() },
        CqFormatKind::Data => const { &cq_ops::<S, CqDataEntry>() },
        CqFormatKind::Tagged | CqFormatKind::Unspec => const { &cq_ops::<S, CqTaggedEntry>() },
    };
    let st = CqState {
        cq,
        refs: Refs::default(),
        holds: Holds::default(),
        _set: in_set,
    };
    st.holds.add(&dom.refs);
    if let Some(w) = set {
        st.holds.add(&w.refs);
    }
    let hdr = sys::fid_cq {
        fid: fid(sys::FI_CLASS_CQ, context, const { &cq_fi_ops::<S>() }),
        ops: ptr_of(ops),
    };
    // SAFETY: `out` is non-NULL and writable by fi_cq_open's contract.
    unsafe { *out = CqObj::<S>::create(hdr, st, sys::FI_CLASS_CQ).cast() };
    0
}

const fn cq_fi_ops<S: St>() -> sys::fi_ops {
    sys::fi_ops {
        size: core::mem::size_of::<sys::fi_ops>(),
        close: Some(cq_close::<S>),
        bind: Some(no_bind),
        control: Some(cq_control::<S>),
        ops_open: Some(no_ops_open),
        tostr: None,
        ops_set: None,
    }
}

unsafe extern "C" fn cq_close<S: St>(f: *mut sys::fid) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { CqObj::<S>::close(f, |s| s.refs.busy(), |s| s.holds.release()) }
}

unsafe extern "C" fn cq_control<S: St>(f: *mut sys::fid, cmd: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CqObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    match (cmd as u32, c.cq.wait_fd()) {
        (sys::FI_GETWAIT, Some(fd)) if !arg.is_null() => {
            // SAFETY: FI_GETWAIT on an FI_WAIT_FD object takes an `int *`.
            unsafe { *arg.cast::<c_int>() = fd };
            0
        }
        (sys::FI_GETWAIT, _) => neg(Error::Inval),
        _ => neg(Error::NoSys),
    }
}

/// The CQ of stack `S` behind `fid`, if it is one and open.
pub(crate) fn cq_of<'a, S: St>(fid: *mut sys::fid) -> Option<&'a CqState<S>> {
    CqObj::<S>::lookup(fid, sys::FI_CLASS_CQ)
}

const fn cq_ops<S: St, E: CEntry>() -> sys::fi_ops_cq {
    sys::fi_ops_cq {
        size: core::mem::size_of::<sys::fi_ops_cq>(),
        read: Some(cq_read::<S, E>),
        readfrom: Some(cq_readfrom::<S, E>),
        readerr: Some(cq_readerr::<S>),
        sread: Some(cq_sread::<S, E>),
        sreadfrom: Some(cq_sreadfrom::<S, E>),
        signal: Some(cq_signal::<S>),
        strerror: Some(cq_strerror),
    }
}

/// How many entries one read takes at most (a read may return fewer than asked).
const MAX_READ: usize = 1 << 16;
/// How many entries one read takes at most when converting formats.
const CHUNK: usize = 64;
/// The staging buffer of reads of a few entries (a poll loop's usual one), so they do
/// not clear a whole chunk each time.
const SMALL: usize = 4;

/// Reads up to `n <= K` entries into a staging buffer of `K` tagged entries and
/// converts them into C's buffer of `E`s.
///
/// # Safety
/// `buf` has room for `n` `E`s.
#[inline]
unsafe fn read_converted<E: CEntry, const K: usize>(
    buf: *mut c_void,
    n: usize,
    src: Option<&mut [FiAddr]>,
    read: impl FnOnce(&mut [CqTaggedEntry], Option<&mut [FiAddr]>) -> fabric::Result<usize>,
) -> fabric::Result<usize> {
    let mut tmp = [CqTaggedEntry::default(); K];
    let r = read(&mut tmp[..n], src);
    if let Ok(k) = r {
        let out = buf.cast::<E>();
        for (i, e) in tmp[..k].iter().enumerate() {
            // SAFETY: `k <= n` entries fit in `buf` by the caller's contract.
            unsafe { out.add(i).write_unaligned(E::from_tagged(e)) };
        }
    }
    r
}

/// Reads into C's buffer of `E`s: straight into it for the tagged format (the stored
/// one), through a stack buffer otherwise.
///
/// # Safety
/// `buf` points to `count` writable `E`s, `src` is NULL or to `count` `fi_addr_t`s.
#[inline]
unsafe fn read_into<E: CEntry>(
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
    read: impl FnOnce(&mut [CqTaggedEntry], Option<&mut [FiAddr]>) -> fabric::Result<usize>,
) -> isize {
    if buf.is_null() && count != 0 {
        return EINVAL;
    }
    let n = if E::DIRECT {
        count.min(MAX_READ)
    } else {
        count.min(CHUNK)
    };
    // SAFETY: `src` is NULL or `count` addresses by the caller's contract; FiAddr is a
    // transparent u64.
    let src = (!src.is_null())
        .then(|| unsafe { core::slice::from_raw_parts_mut(src.cast::<FiAddr>(), n) });
    let r = if E::DIRECT {
        // SAFETY: E is CqTaggedEntry here (the only DIRECT format), which is
        // #[repr(C)] like `struct fi_cq_tagged_entry`; `buf` holds `count` of them.
        let out = unsafe { core::slice::from_raw_parts_mut(buf.cast::<CqTaggedEntry>(), n) };
        read(out, src)
    } else if n <= SMALL {
        // SAFETY: the caller's contract, `n <= count`.
        unsafe { read_converted::<E, SMALL>(buf, n, src, read) }
    } else {
        // SAFETY: as above.
        unsafe { read_converted::<E, CHUNK>(buf, n, src, read) }
    };
    match r {
        Ok(k) => k as isize,
        Err(e) => neg(e) as isize,
    }
}

unsafe extern "C" fn cq_read<S: St, E: CEntry>(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
) -> isize {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CqObj::<S>::state(cq) }) else {
        return EINVAL;
    };
    // SAFETY: fi_cq_read's contract on `buf`.
    unsafe { read_into::<E>(buf, count, ptr::null_mut(), |o, _| c.cq.read(o)) }
}

unsafe extern "C" fn cq_readfrom<S: St, E: CEntry>(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut sys::fi_addr_t,
) -> isize {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CqObj::<S>::state(cq) }) else {
        return EINVAL;
    };
    // SAFETY: fi_cq_readfrom's contract on `buf` and `src`.
    unsafe {
        read_into::<E>(buf, count, src, |o, s| match s {
            Some(s) => c.cq.read_from(o, s),
            None => c.cq.read(o),
        })
    }
}

fn timeout(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

unsafe extern "C" fn cq_sread<S: St, E: CEntry>(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    ms: c_int,
) -> isize {
    // SAFETY: as `cq_readfrom`.
    unsafe { cq_sreadfrom::<S, E>(cq, buf, count, ptr::null_mut(), cond, ms) }
}

unsafe extern "C" fn cq_sreadfrom<S: St, E: CEntry>(
    cq: *mut sys::fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut sys::fi_addr_t,
    cond: *const c_void,
    ms: c_int,
) -> isize {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CqObj::<S>::state(cq) }) else {
        return EINVAL;
    };
    // With FI_CQ_COND_THRESHOLD, `cond` carries the threshold as a size_t value.
    let threshold = cond as usize;
    let t = timeout(ms);
    // SAFETY: fi_cq_sreadfrom's contract on `buf` and `src`.
    unsafe {
        read_into::<E>(buf, count, src, |o, s| match s {
            Some(s) => c.cq.sread_from(o, s, threshold, t),
            None => c.cq.sread(o, threshold, t),
        })
    }
}

unsafe extern "C" fn cq_readerr<S: St>(
    cq: *mut sys::fid_cq,
    buf: *mut sys::fi_cq_err_entry,
    _flags: u64,
) -> isize {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CqObj::<S>::state(cq) }) else {
        return EINVAL;
    };
    if buf.is_null() {
        return EINVAL;
    }
    match c.cq.read_err() {
        Ok(e) => {
            // SAFETY: `buf` is a writable fi_cq_err_entry by fi_cq_readerr's contract.
            let b = unsafe { &mut *buf };
            b.op_context = e.context.0 as *mut c_void;
            b.flags = e.flags.bits();
            b.len = e.len;
            b.buf = e.buf as *mut c_void;
            b.data = e.data;
            b.tag = e.tag;
            b.olen = e.olen;
            b.err = e.err.code();
            b.prov_errno = e.prov_errno;
            // No provider data beyond prov_errno: an application buffer is left
            // untouched and said to hold nothing.
            b.err_data_size = 0;
            1
        }
        Err(e) => neg(e) as isize,
    }
}

unsafe extern "C" fn cq_signal<S: St>(cq: *mut sys::fid_cq) -> c_int {
    // SAFETY: called through this type's ops table.
    match unsafe { CqObj::<S>::state(cq) } {
        Some(c) => {
            c.cq.signal();
            0
        }
        None => neg(Error::Inval),
    }
}

unsafe extern "C" fn cq_strerror(
    _cq: *mut sys::fid_cq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: fi_cq_strerror's contract on `buf`.
    unsafe { strerror_into(prov_errno, buf, len) }
}

// ---- counters -------------------------------------------------------------------------

unsafe extern "C" fn cntr_open<S: St>(
    d: *mut sys::fid_domain,
    attr: *mut sys::fi_cntr_attr,
    out: *mut *mut sys::fid_cntr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    if out.is_null() {
        return neg(Error::Inval);
    }
    let mut set = None;
    // SAFETY: NULL (defaults) or valid by fi_cntr_open's contract.
    let ca = match unsafe { attr.as_ref() } {
        None => CntrAttr::default(),
        Some(a) => {
            let Some(wait_obj) = WaitObj::from_raw(a.wait_obj) else {
                return neg(Error::Inval);
            };
            if a.events != sys::FI_CNTR_EVENTS_COMP {
                return neg(Error::Inval);
            }
            // fi_cntr(3): `wait_set` is ignored unless the wait object is FI_WAIT_SET.
            if wait_obj == WaitObj::Set {
                match waitset::lookup(a.wait_set) {
                    Some(w) => set = Some(w),
                    None => return neg(Error::Inval),
                }
            }
            if a.flags != 0 {
                return neg(Error::BadFlags);
            }
            CntrAttr {
                events: a.events,
                wait_obj,
                flags: 0,
            }
        }
    };
    let r = match set {
        Some(w) => w.cntr(&dom.domain, &ca).map(|(c, s)| (c, Some(s))),
        None => dom.domain.cntr(&ca).map(|c| (c, None)),
    };
    let (cntr, in_set) = match r {
        Ok(c) => c,
        Err(e) => return neg(e),
    };
    let st = CntrState {
        cntr,
        refs: Refs::default(),
        holds: Holds::default(),
        _set: in_set,
    };
    st.holds.add(&dom.refs);
    if let Some(w) = set {
        st.holds.add(&w.refs);
    }
    let hdr = sys::fid_cntr {
        fid: fid(sys::FI_CLASS_CNTR, context, const { &cntr_fi_ops::<S>() }),
        ops: ptr_of(const { &cntr_ops::<S>() }),
    };
    // SAFETY: `out` is non-NULL and writable by fi_cntr_open's contract.
    unsafe { *out = CntrObj::<S>::create(hdr, st, sys::FI_CLASS_CNTR).cast() };
    0
}

const fn cntr_fi_ops<S: St>() -> sys::fi_ops {
    sys::fi_ops {
        size: core::mem::size_of::<sys::fi_ops>(),
        close: Some(cntr_close::<S>),
        bind: Some(no_bind),
        control: Some(cntr_control::<S>),
        ops_open: Some(no_ops_open),
        tostr: None,
        ops_set: None,
    }
}

unsafe extern "C" fn cntr_close<S: St>(f: *mut sys::fid) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { CntrObj::<S>::close(f, |s| s.refs.busy(), |s| s.holds.release()) }
}

unsafe extern "C" fn cntr_control<S: St>(f: *mut sys::fid, cmd: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(c) = (unsafe { CntrObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    match (cmd as u32, c.cntr.wait_fd()) {
        (sys::FI_GETWAIT, Some(fd)) if !arg.is_null() => {
            // SAFETY: FI_GETWAIT on an FI_WAIT_FD object takes an `int *`.
            unsafe { *arg.cast::<c_int>() = fd };
            0
        }
        (sys::FI_GETWAIT, _) => neg(Error::Inval),
        _ => neg(Error::NoSys),
    }
}

/// The counter of stack `S` behind `fid`, if it is one and open.
pub(crate) fn cntr_of<'a, S: St>(fid: *mut sys::fid) -> Option<&'a CntrState<S>> {
    CntrObj::<S>::lookup(fid, sys::FI_CLASS_CNTR)
}

const fn cntr_ops<S: St>() -> sys::fi_ops_cntr {
    sys::fi_ops_cntr {
        size: core::mem::size_of::<sys::fi_ops_cntr>(),
        read: Some(cntr_read::<S>),
        readerr: Some(cntr_readerr::<S>),
        add: Some(cntr_add::<S>),
        set: Some(cntr_set::<S>),
        wait: Some(cntr_wait::<S>),
        adderr: Some(cntr_adderr::<S>),
        seterr: Some(cntr_seterr::<S>),
    }
}

/// `fi_cntr_read` and `fi_cntr_readerr` return a value, not an error: a closed or
/// NULL counter reads as 0.
unsafe extern "C" fn cntr_read<S: St>(c: *mut sys::fid_cntr) -> u64 {
    // SAFETY: called through this type's ops table.
    unsafe { CntrObj::<S>::state(c) }.map_or(0, |c| c.cntr.read())
}

unsafe extern "C" fn cntr_readerr<S: St>(c: *mut sys::fid_cntr) -> u64 {
    // SAFETY: called through this type's ops table.
    unsafe { CntrObj::<S>::state(c) }.map_or(0, |c| c.cntr.read_err())
}

/// Applies `f` to the counter behind `c`: 0, or `-FI_EINVAL` for a closed one.
///
/// # Safety
/// As [`Obj::state`].
unsafe fn with_cntr<S: St>(c: *mut sys::fid_cntr, f: impl FnOnce(&Counter<S>)) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { CntrObj::<S>::state(c) } {
        Some(c) => {
            f(&c.cntr);
            0
        }
        None => neg(Error::Inval),
    }
}

unsafe extern "C" fn cntr_add<S: St>(c: *mut sys::fid_cntr, v: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { with_cntr::<S>(c, |c| c.add(v)) }
}

unsafe extern "C" fn cntr_set<S: St>(c: *mut sys::fid_cntr, v: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { with_cntr::<S>(c, |c| c.set(v)) }
}

unsafe extern "C" fn cntr_adderr<S: St>(c: *mut sys::fid_cntr, v: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { with_cntr::<S>(c, |c| c.add_err(v)) }
}

unsafe extern "C" fn cntr_seterr<S: St>(c: *mut sys::fid_cntr, v: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { with_cntr::<S>(c, |c| c.set_err(v)) }
}

unsafe extern "C" fn cntr_wait<S: St>(c: *mut sys::fid_cntr, threshold: u64, ms: c_int) -> c_int {
    // SAFETY: called through this type's ops table.
    match unsafe { CntrObj::<S>::state(c) } {
        // The core says Again at the timeout; fi_cntr_wait's C contract says ETIMEDOUT.
        Some(c) => match c.cntr.wait(threshold, timeout(ms)) {
            Err(Error::Again) => neg(Error::TimedOut),
            r => ret(r),
        },
        None => neg(Error::Inval),
    }
}

// ---- address vectors ------------------------------------------------------------------

unsafe extern "C" fn av_open<S: St>(
    d: *mut sys::fid_domain,
    attr: *mut sys::fi_av_attr,
    out: *mut *mut sys::fid_av,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: NULL or valid by fi_av_open's contract.
    let (Some(a), false) = (unsafe { attr.as_ref() }, out.is_null()) else {
        return neg(Error::Inval);
    };
    let Some(kind) = AvKind::from_raw(a.type_) else {
        return neg(Error::Inval);
    };
    // The domain's stack fixed the AV type; another one would need another stack. A
    // table serves a request for a map: a map's addresses are whatever values insert
    // returns, and a table's indices are such values (libfabric's own util AV does the
    // same). A map cannot serve a table, whose addresses must be 0, 1, 2...
    let fits = match kind {
        AvKind::Unspec => true,
        AvKind::Map => matches!(<S::Av as AvType>::KIND, AvKind::Map | AvKind::Table),
        k => k == <S::Av as AvType>::KIND,
    };
    if !fits {
        return neg(Error::Inval);
    }
    if !a.name.is_null() || !a.map_addr.is_null() || a.rx_ctx_bits != 0 {
        return neg(Error::NoSys);
    }
    if a.flags != 0 {
        return neg(Error::BadFlags);
    }
    let aa = AvAttr {
        av_type: <S::Av as AvType>::KIND,
        count: a.count,
        ep_per_node: a.ep_per_node,
        ..AvAttr::default()
    };
    let av = match dom.domain.av(&aa) {
        Ok(a) => a,
        Err(e) => return neg(e),
    };
    let st = AvState {
        av,
        refs: Refs::default(),
        holds: Holds::default(),
    };
    st.holds.add(&dom.refs);
    let hdr = sys::fid_av {
        fid: fid(sys::FI_CLASS_AV, context, const { &av_fi_ops::<S>() }),
        ops: ptr_of(const { &av_ops::<S>() }),
    };
    // SAFETY: `out` is non-NULL and writable by fi_av_open's contract.
    unsafe { *out = AvObj::<S>::create(hdr, st, sys::FI_CLASS_AV).cast() };
    0
}

const fn av_fi_ops<S: St>() -> sys::fi_ops {
    sys::fi_ops {
        size: core::mem::size_of::<sys::fi_ops>(),
        close: Some(av_close::<S>),
        bind: Some(no_bind),
        control: Some(no_control),
        ops_open: Some(no_ops_open),
        tostr: None,
        ops_set: None,
    }
}

unsafe extern "C" fn av_close<S: St>(f: *mut sys::fid) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { AvObj::<S>::close(f, |s| s.refs.busy(), |s| s.holds.release()) }
}

const fn av_ops<S: St>() -> sys::fi_ops_av {
    sys::fi_ops_av {
        size: core::mem::size_of::<sys::fi_ops_av>(),
        insert: Some(av_insert::<S>),
        insertsvc: Some(av_insertsvc::<S>),
        insertsym: Some(av_insertsym),
        remove: Some(av_remove::<S>),
        lookup: Some(av_lookup::<S>),
        straddr: Some(av_straddr::<S>),
        av_set: None,
    }
}

unsafe extern "C" fn av_insert<S: St>(
    av: *mut sys::fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut sys::fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return neg(Error::Inval);
    };
    if flags & !(sys::FI_MORE as u64 | sys::FI_SYNC_ERR) != 0 {
        return neg(Error::BadFlags);
    }
    let mut at = addr.cast::<u8>();
    let mut done = 0;
    for i in 0..count {
        // SAFETY: `addr` holds `count` of our addresses by fi_av_insert's contract, and
        // each is at least as long as its head.
        let Some(head) = (unsafe { bytes(at.cast(), <S::Provider as Exposed>::ADDR_HEAD) }) else {
            return neg(Error::Inval);
        };
        let Some(len) = <S::Provider as Exposed>::addr_len(head) else {
            // Without a length the next addresses cannot be found.
            return if done == 0 {
                neg(Error::Inval)
            } else {
                done as c_int
            };
        };
        // SAFETY: as above; the head says how long this address is.
        let Some(name) = (unsafe { bytes(at.cast(), len) }) else {
            return neg(Error::Inval);
        };
        let r = a.av.insert(name);
        if !fi_addr.is_null() {
            // SAFETY: `fi_addr` has `count` slots by fi_av_insert's contract.
            unsafe { *fi_addr.add(i) = r.map_or(u64::MAX, |f| f.0) };
        }
        done += usize::from(r.is_ok());
        // SAFETY: still within the caller's array, or one past its end.
        at = unsafe { at.add(len) };
    }
    done as c_int
}

unsafe extern "C" fn av_insertsvc<S: St>(
    av: *mut sys::fid_av,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut sys::fi_addr_t,
    flags: u64,
    _context: *mut c_void,
) -> c_int {
    // shm addresses come from fi_getname; no node/service names them.
    if !<S::Provider as Exposed>::NODE_SERVICE {
        return -(sys::FI_ENOSYS as c_int);
    }
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return neg(Error::Inval);
    };
    if flags & !(sys::FI_MORE as u64 | sys::FI_SYNC_ERR) != 0 {
        return neg(Error::BadFlags);
    }
    if node.is_null() || service.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: non-NULL C strings by fi_av_insertsvc's contract.
    let (n, svc) = unsafe { (CStr::from_ptr(node), CStr::from_ptr(service)) };
    let (Ok(n), Ok(svc)) = (n.to_str(), svc.to_str()) else {
        return neg(Error::Inval);
    };
    let r = a.av.insert_svc(n, svc);
    if !fi_addr.is_null() {
        // SAFETY: one slot by fi_av_insertsvc's contract.
        unsafe { *fi_addr = r.as_ref().map_or(u64::MAX, |f| f.0) };
    }
    match r {
        Ok(_) => 1,
        Err(e) => neg(e),
    }
}

unsafe extern "C" fn av_insertsym(
    _: *mut sys::fid_av,
    _: *const c_char,
    _: usize,
    _: *const c_char,
    _: usize,
    _: *mut sys::fi_addr_t,
    _: u64,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

unsafe extern "C" fn av_remove<S: St>(
    av: *mut sys::fid_av,
    fi_addr: *mut sys::fi_addr_t,
    count: usize,
    flags: u64,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return neg(Error::Inval);
    };
    if flags != 0 {
        return neg(Error::BadFlags);
    }
    if count == 0 {
        return 0;
    }
    if fi_addr.is_null() || count > isize::MAX as usize / core::mem::size_of::<FiAddr>() {
        return neg(Error::Inval);
    }
    // SAFETY: `count` addresses by fi_av_remove's contract; FiAddr is a transparent u64.
    let v = unsafe { core::slice::from_raw_parts(fi_addr.cast::<FiAddr>(), count) };
    ret(a.av.remove(v))
}

unsafe extern "C" fn av_lookup<S: St>(
    av: *mut sys::fid_av,
    fi_addr: sys::fi_addr_t,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return neg(Error::Inval);
    };
    if addrlen.is_null() {
        return neg(Error::Inval);
    }
    match a.av.lookup(FiAddr(fi_addr)) {
        // SAFETY: `addrlen` is readable and writable, `addr` has `*addrlen` bytes.
        Ok(name) => unsafe { copy_out(&name, addr, addrlen) },
        Err(e) => neg(e),
    }
}

unsafe extern "C" fn av_straddr<S: St>(
    av: *mut sys::fid_av,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    // SAFETY: called through this type's ops table.
    let Some(a) = (unsafe { AvObj::<S>::state(av) }) else {
        return ptr::null();
    };
    // SAFETY: `addr` is one of our addresses by fi_av_straddr's contract.
    let name = unsafe { bytes(addr, <S::Provider as Exposed>::ADDR_HEAD) }
        .and_then(<S::Provider as Exposed>::addr_len)
        // SAFETY: as above; the head says how long the address is.
        .and_then(|len| unsafe { bytes(addr, len) });
    let (Some(name), false, false) = (name, buf.is_null(), len.is_null()) else {
        return ptr::null();
    };
    let mut s = a.av.straddr(name).into_bytes();
    s.push(0);
    // SAFETY: `len` is valid and `buf` has `*len` bytes (checked non-NULL above); the
    // result is truncated and NUL-terminated like libfabric's providers do.
    unsafe {
        let room = *len;
        *len = s.len();
        if room > 0 {
            let n = s.len().min(room);
            ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, n);
            *buf.add(n - 1) = 0;
        }
    }
    buf
}

// ---- memory regions -------------------------------------------------------------------

const fn mr_ops<S: St>() -> sys::fi_ops_mr {
    sys::fi_ops_mr {
        size: core::mem::size_of::<sys::fi_ops_mr>(),
        reg: Some(mr_reg::<S>),
        regv: Some(mr_regv::<S>),
        regattr: Some(mr_regattr::<S>),
    }
}

unsafe extern "C" fn mr_reg<S: St>(
    d: *mut sys::fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
    context: *mut c_void,
) -> c_int {
    let iov = sys::iovec {
        iov_base: buf as *mut c_void,
        iov_len: len,
    };
    // SAFETY: the same contract, one iovec on our stack.
    unsafe {
        mr_regv::<S>(
            d,
            &iov,
            1,
            access,
            offset,
            requested_key,
            flags,
            mr,
            context,
        )
    }
}

unsafe extern "C" fn mr_regattr<S: St>(
    d: *mut sys::fid,
    attr: *const sys::fi_mr_attr,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
) -> c_int {
    // SAFETY: NULL or valid by fi_mr_regattr's contract.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return neg(Error::Inval);
    };
    if a.iface != sys::FI_HMEM_SYSTEM || a.auth_key_size != 0 {
        return neg(Error::NoSys);
    }
    // SAFETY: the attribute's fields carry fi_mr_regv's contract.
    unsafe {
        mr_regv::<S>(
            d,
            a.mr_iov,
            a.iov_count,
            a.access,
            a.offset,
            a.requested_key,
            flags,
            mr,
            a.context,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_regv<S: St>(
    d: *mut sys::fid,
    iov: *const sys::iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut sys::fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's (the domain's) MR ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    if mr.is_null() {
        return neg(Error::Inval);
    }
    if flags != 0 {
        return neg(Error::BadFlags);
    }
    let Some(access) = MrAccess::from_bits(access) else {
        return neg(Error::Inval);
    };
    // SAFETY: C keeps the registered memory valid until it closes the MR (fi_mr_reg's
    // contract), which is what the 'static lifetime stands for here.
    let Some(bufs) = (unsafe { iovs(iov, count) }) else {
        return neg(Error::Inval);
    };
    let attr = MrAttr {
        access,
        offset,
        requested_key,
        context: context as usize,
    };
    let region = match dom.domain.mr_regv(bufs, &attr) {
        Ok(r) => r,
        Err(e) => return neg(e),
    };
    let key = region.key();
    let st = MrState {
        _mr: region,
        holds: Holds::default(),
    };
    st.holds.add(&dom.refs);
    let hdr = sys::fid_mr {
        fid: fid(sys::FI_CLASS_MR, context, const { &mr_fi_ops::<S>() }),
        mem_desc: ptr::null_mut(),
        key,
    };
    let p = MrObj::<S>::create(hdr, st, sys::FI_CLASS_MR);
    // Descriptors are not needed (no FI_MR_LOCAL); a non-NULL one names the region.
    // SAFETY: `p` was just created and is ours; `mr` is writable (checked non-NULL).
    unsafe {
        (*p).hdr.mem_desc = p.cast();
        *mr = p.cast();
    }
    0
}

const fn mr_fi_ops<S: St>() -> sys::fi_ops {
    sys::fi_ops {
        size: core::mem::size_of::<sys::fi_ops>(),
        close: Some(mr_close::<S>),
        bind: Some(no_bind),
        control: Some(no_control),
        ops_open: Some(no_ops_open),
        tostr: None,
        ops_set: None,
    }
}

unsafe extern "C" fn mr_close<S: St>(f: *mut sys::fid) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { MrObj::<S>::close(f, |_| false, |s| s.holds.release()) }
}

// ---- endpoints ------------------------------------------------------------------------

unsafe extern "C" fn ep_open<S: St>(
    d: *mut sys::fid_domain,
    info: *mut sys::fi_info,
    out: *mut *mut sys::fid_ep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(dom) = (unsafe { DomainObj::<S>::state(d) }) else {
        return neg(Error::Inval);
    };
    if out.is_null() {
        return neg(Error::Inval);
    }
    let (info, request) = if info.is_null() {
        (dom.info.clone(), ptr::null_mut())
    } else {
        // SAFETY: a valid fi_info by fi_endpoint's contract.
        match unsafe { crate::info_from_app::<S::Provider>(info) } {
            // SAFETY: as above.
            Ok(i) => (i, unsafe { (*info).handle }),
            Err(e) => return neg(e),
        }
    };
    let ep = match dom.domain.endpoint(&info) {
        Ok(e) => e,
        Err(e) => return neg(e),
    };
    // The endpoint holds the request it will accept; C's handle is no longer needed.
    if !request.is_null() {
        crate::connreq::release(request);
    }
    let st = EpState {
        ep,
        holds: Holds::default(),
    };
    st.holds.add(&dom.refs);
    let hdr = sys::fid_ep {
        fid: fid(sys::FI_CLASS_EP, context, const { &ep_fi_ops::<S>() }),
        ops: ptr_of(const { &ep_ops::<S>() }),
        cm: ptr_of(const { &cm_ops::<S>() }),
        msg: ptr_of(const { &msg_ops::<S>() }),
        rma: ptr_of(const { &rma_ops::<S>() }),
        tagged: ptr_of(const { &tagged_ops::<S>() }),
        atomic: ptr_of(const { &atomic_ops::<S>() }),
        collective: ptr_of(&crate::nosys::COLL),
    };
    let p = EpObj::<S>::create(hdr, st, sys::FI_CLASS_EP);
    // SAFETY: just created, live.
    if let Some(s) = unsafe { EpObj::<S>::state(p) } {
        // Connection events name the endpoint by its fid, as C compares them; RDM
        // and DGRAM endpoints have none (and say so).
        let _ = s.ep.set_fid_context(fabric::Context(p as usize));
    }
    // SAFETY: `out` is non-NULL and writable by fi_endpoint's contract.
    unsafe { *out = p.cast() };
    0
}

const fn ep_fi_ops<S: St>() -> sys::fi_ops {
    sys::fi_ops {
        size: core::mem::size_of::<sys::fi_ops>(),
        close: Some(ep_close::<S>),
        bind: Some(ep_bind::<S>),
        control: Some(ep_control::<S>),
        ops_open: Some(no_ops_open),
        tostr: None,
        ops_set: None,
    }
}

unsafe extern "C" fn ep_close<S: St>(f: *mut sys::fid) -> c_int {
    // SAFETY: called through this type's ops table.
    unsafe { EpObj::<S>::close(f, |_| false, |s| s.holds.release()) }
}

unsafe extern "C" fn ep_bind<S: St>(f: *mut sys::fid, b: *mut sys::fid, flags: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    if b.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: non-NULL; every fid starts with its class (the lookup below then checks
    // it is really one of ours before anything else is read).
    let class = unsafe { (*b).fclass } as u32;
    match class {
        sys::FI_CLASS_CQ => {
            let Some(cq) = CqObj::<S>::lookup(b, class) else {
                return neg(Error::Inval);
            };
            let Some(bf) = BindFlags::from_bits(flags) else {
                return neg(Error::BadFlags);
            };
            let r = e.ep.bind_cq(&cq.cq, bf);
            if r.is_ok() {
                e.holds.add(&cq.refs);
            }
            ret(r)
        }
        sys::FI_CLASS_AV => {
            let Some(av) = AvObj::<S>::lookup(b, class) else {
                return neg(Error::Inval);
            };
            if flags != 0 {
                return neg(Error::BadFlags);
            }
            let r = e.ep.bind_av(&av.av);
            if r.is_ok() {
                e.holds.add(&av.refs);
            }
            ret(r)
        }
        sys::FI_CLASS_CNTR => {
            let Some(cntr) = CntrObj::<S>::lookup(b, class) else {
                return neg(Error::Inval);
            };
            let Some(bf) = BindFlags::from_bits(flags) else {
                return neg(Error::BadFlags);
            };
            let r = e.ep.bind_cntr(&cntr.cntr, bf);
            if r.is_ok() {
                e.holds.add(&cntr.refs);
            }
            ret(r)
        }
        // An EQ runs on the fabric's EQ stack: endpoints on it (MSG ones always) take
        // one; others are on another stack and cannot yet.
        sys::FI_CLASS_EQ => {
            if flags != 0 {
                return neg(Error::BadFlags);
            }
            match crate::eq::lookup::<S>(b) {
                Some(q) => ret(e.ep.bind_eq(q)),
                None if crate::eq::lookup::<crate::eq::EqStack<S::Provider>>(b).is_some() => {
                    neg(Error::NoSys)
                }
                None => neg(Error::Inval),
            }
        }
        // Shared contexts are not offered through the plugin yet.
        sys::FI_CLASS_STX_CTX | sys::FI_CLASS_SRX_CTX => neg(Error::NoSys),
        _ => neg(Error::Inval),
    }
}

unsafe extern "C" fn ep_control<S: St>(f: *mut sys::fid, cmd: c_int, _arg: *mut c_void) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    match cmd as u32 {
        sys::FI_ENABLE => ret(e.ep.enable()),
        _ => neg(Error::NoSys),
    }
}

const fn ep_ops<S: St>() -> sys::fi_ops_ep {
    sys::fi_ops_ep {
        size: core::mem::size_of::<sys::fi_ops_ep>(),
        cancel: Some(ep_cancel::<S>),
        getopt: Some(ep_getopt::<S>),
        setopt: Some(ep_setopt::<S>),
        tx_ctx: Some(ep_tx_ctx),
        rx_ctx: Some(ep_rx_ctx),
        rx_size_left: Some(ep_rx_size_left::<S>),
        tx_size_left: Some(ep_tx_size_left::<S>),
    }
}

unsafe extern "C" fn ep_cancel<S: St>(f: *mut sys::fid, context: *mut c_void) -> isize {
    // SAFETY: called through the endpoint's ops table.
    match unsafe { EpObj::<S>::state(f) } {
        Some(e) => sret(e.ep.cancel(Context(context as usize))),
        None => EINVAL,
    }
}

/// The option `level`/`name` names, as the core calls it.
fn opt_name(level: c_int, name: c_int) -> Option<EpOptName> {
    if level as u32 != sys::FI_OPT_ENDPOINT {
        return None;
    }
    match name as u32 {
        sys::FI_OPT_MIN_MULTI_RECV => Some(EpOptName::MinMultiRecv),
        sys::FI_OPT_CM_DATA_SIZE => Some(EpOptName::CmDataSize),
        _ => None,
    }
}

unsafe extern "C" fn ep_getopt<S: St>(
    f: *mut sys::fid,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    let Some(opt) = opt_name(level, name) else {
        return neg(Error::NoProtoOpt);
    };
    if val.is_null() || len.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: `len` is valid by fi_getopt's contract.
    if unsafe { *len } < core::mem::size_of::<usize>() {
        return neg(Error::TooSmall);
    }
    let v = match e.ep.getopt(opt) {
        Ok(EpOpt::MinMultiRecv(v) | EpOpt::CmDataSize(v)) => v,
        Err(err) => return neg(err),
    };
    // SAFETY: both options are `size_t`s, and `val` has room for one (checked above).
    unsafe {
        val.cast::<usize>().write_unaligned(v);
        *len = core::mem::size_of::<usize>();
    }
    0
}

unsafe extern "C" fn ep_setopt<S: St>(
    f: *mut sys::fid,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    let Some(opt) = opt_name(level, name) else {
        return neg(Error::NoProtoOpt);
    };
    if val.is_null() || len != core::mem::size_of::<usize>() {
        return neg(Error::Inval);
    }
    // SAFETY: a `size_t` by fi_setopt's contract (length checked above).
    let v = unsafe { val.cast::<usize>().read_unaligned() };
    ret(e.ep.setopt(match opt {
        EpOptName::MinMultiRecv => EpOpt::MinMultiRecv(v),
        EpOptName::CmDataSize => EpOpt::CmDataSize(v),
    }))
}

unsafe extern "C" fn ep_tx_ctx(
    _: *mut sys::fid_ep,
    _: c_int,
    _: *mut sys::fi_tx_attr,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

unsafe extern "C" fn ep_rx_ctx(
    _: *mut sys::fid_ep,
    _: c_int,
    _: *mut sys::fi_rx_attr,
    _: *mut *mut sys::fid_ep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

unsafe extern "C" fn ep_rx_size_left<S: St>(ep: *mut sys::fid_ep) -> isize {
    // SAFETY: called through this type's ops table.
    match unsafe { EpObj::<S>::state(ep) } {
        Some(e) => e.ep.rx_size_left() as isize,
        None => EINVAL,
    }
}

unsafe extern "C" fn ep_tx_size_left<S: St>(ep: *mut sys::fid_ep) -> isize {
    // SAFETY: called through this type's ops table.
    match unsafe { EpObj::<S>::state(ep) } {
        Some(e) => e.ep.tx_size_left() as isize,
        None => EINVAL,
    }
}

const fn cm_ops<S: St>() -> sys::fi_ops_cm {
    sys::fi_ops_cm {
        size: core::mem::size_of::<sys::fi_ops_cm>(),
        setname: Some(cm_setname),
        getname: Some(cm_getname::<S>),
        getpeer: Some(cm_getpeer::<S>),
        connect: Some(cm_connect::<S>),
        listen: Some(cm_listen),
        accept: Some(cm_accept::<S>),
        reject: Some(cm_reject),
        shutdown: Some(cm_shutdown::<S>),
        join: Some(cm_join),
    }
}

unsafe extern "C" fn cm_getname<S: St>(
    f: *mut sys::fid,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    if addrlen.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: `addrlen` is valid, `addr` NULL or `*addrlen` bytes (fi_getname).
    unsafe { copy_out(&e.ep.name(), addr, addrlen) }
}

unsafe extern "C" fn cm_setname(_: *mut sys::fid, _: *mut c_void, _: usize) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn cm_getpeer<S: St>(
    f: *mut sys::fid_ep,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    if addrlen.is_null() {
        return neg(Error::Inval);
    }
    match e.ep.peer() {
        // SAFETY: `addrlen` is valid, `addr` NULL or `*addrlen` bytes (fi_getpeer).
        Ok(name) => unsafe { copy_out(&name, addr, addrlen) },
        Err(err) => neg(err),
    }
}
unsafe extern "C" fn cm_connect<S: St>(
    f: *mut sys::fid_ep,
    addr: *const c_void,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: `addr` is one of our addresses by fi_connect's contract; its head says
    // how long it is.
    let name = unsafe { bytes(addr, <S::Provider as Exposed>::ADDR_HEAD) }
        .and_then(<S::Provider as Exposed>::addr_len)
        // SAFETY: as above.
        .and_then(|len| unsafe { bytes(addr, len) });
    // SAFETY: `param` holds `paramlen` bytes by fi_connect's contract.
    let (Some(name), Some(data)) = (name, unsafe { bytes(param, paramlen) }) else {
        return neg(Error::Inval);
    };
    ret(e.ep.connect(name, data))
}
unsafe extern "C" fn cm_listen(_: *mut sys::fid_pep) -> c_int {
    // An active endpoint does not listen; passive ones have their own table.
    neg(Error::Inval)
}
unsafe extern "C" fn cm_accept<S: St>(
    f: *mut sys::fid_ep,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: `param` holds `paramlen` bytes by fi_accept's contract.
    match unsafe { bytes(param, paramlen) } {
        Some(data) => ret(e.ep.accept(data)),
        None => neg(Error::Inval),
    }
}
unsafe extern "C" fn cm_reject(
    _: *mut sys::fid_pep,
    _: sys::fid_t,
    _: *const c_void,
    _: usize,
) -> c_int {
    neg(Error::Inval)
}
unsafe extern "C" fn cm_shutdown<S: St>(f: *mut sys::fid_ep, flags: u64) -> c_int {
    // SAFETY: called through this type's ops table.
    let Some(e) = (unsafe { EpObj::<S>::state(f) }) else {
        return neg(Error::Inval);
    };
    if flags != 0 {
        return neg(Error::BadFlags);
    }
    ret(e.ep.shutdown())
}
unsafe extern "C" fn cm_join(
    _: *mut sys::fid_ep,
    _: *const c_void,
    _: u64,
    _: *mut *mut sys::fid_mc,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

// ---- messages -------------------------------------------------------------------------

const fn msg_ops<S: St>() -> sys::fi_ops_msg {
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

/// The endpoint and the C arguments' buffer, or `-FI_EINVAL` from the calling fn.
macro_rules! ep_or_inval {
    ($ep:expr) => {
        // SAFETY: called through this type's ops table.
        match unsafe { EpObj::<S>::state($ep) } {
            Some(e) => e,
            None => return EINVAL,
        }
    };
}

/// A C buffer argument, or `-FI_EINVAL` from the calling fn.
macro_rules! buf_or_inval {
    ($e:expr) => {
        match $e {
            Some(b) => b,
            None => return EINVAL,
        }
    };
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

// ---- tagged messages --------------------------------------------------------------------

const fn tagged_ops<S: St>() -> sys::fi_ops_tagged {
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

// ---- RMA ------------------------------------------------------------------------------

const fn rma_ops<S: St>() -> sys::fi_ops_rma {
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

// ---- atomics ----------------------------------------------------------------------------

/// A C datatype and operation in the core's terms (`None`: a value libfabric does not
/// define).
fn dt_op(dt: sys::fi_datatype, op: sys::fi_op) -> Option<(Datatype, AtomicOp)> {
    let dt = u8::try_from(dt).ok().and_then(Datatype::from_raw)?;
    let op = u8::try_from(op).ok().and_then(AtomicOp::from_raw)?;
    Some((dt, op))
}

const fn atomic_ops<S: St>() -> sys::fi_ops_atomic {
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

/// The core's completion entries are the C structs, field for field: checked here at
/// compile time against the bindgen layouts, so a C buffer can hold them.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<CqEntry>() == size_of::<sys::fi_cq_entry>());
    assert!(size_of::<CqMsgEntry>() == size_of::<sys::fi_cq_msg_entry>());
    assert!(size_of::<CqDataEntry>() == size_of::<sys::fi_cq_data_entry>());
    assert!(size_of::<CqTaggedEntry>() == size_of::<sys::fi_cq_tagged_entry>());
    assert!(offset_of!(CqMsgEntry, flags) == offset_of!(sys::fi_cq_msg_entry, flags));
    assert!(offset_of!(CqMsgEntry, len) == offset_of!(sys::fi_cq_msg_entry, len));
    assert!(offset_of!(CqDataEntry, buf) == offset_of!(sys::fi_cq_data_entry, buf));
    assert!(offset_of!(CqDataEntry, data) == offset_of!(sys::fi_cq_data_entry, data));
    assert!(
        offset_of!(CqTaggedEntry, op_context) == offset_of!(sys::fi_cq_tagged_entry, op_context)
    );
    assert!(offset_of!(CqTaggedEntry, flags) == offset_of!(sys::fi_cq_tagged_entry, flags));
    assert!(offset_of!(CqTaggedEntry, len) == offset_of!(sys::fi_cq_tagged_entry, len));
    assert!(offset_of!(CqTaggedEntry, buf) == offset_of!(sys::fi_cq_tagged_entry, buf));
    assert!(offset_of!(CqTaggedEntry, data) == offset_of!(sys::fi_cq_tagged_entry, data));
    assert!(offset_of!(CqTaggedEntry, tag) == offset_of!(sys::fi_cq_tagged_entry, tag));
    assert!(size_of::<FiAddr>() == size_of::<sys::fi_addr_t>());
};
