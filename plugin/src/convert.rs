//! `struct fi_info` from C into the core's [`Info`]/[`Hints`] and back.
//!
//! Infos handed to C are allocated with `calloc`/`strdup`, because libfabric releases
//! them with `fi_freeinfo`, which calls `free` on every part.

use core::ffi::{c_char, c_void, CStr};
use core::ptr;

use fabric::attr::{
    AddrFormat, AvKind, DomainAttr, EpAttr, EpType, FabricAttr, ProgressMode, ResourceMgmt, RxAttr,
    ThreadingLevel, TxAttr,
};
use fabric::flags::{Caps, Mode, MrMode, OpFlags, Order};
use fabric::info::{Hints, Info};

use crate::sys;

/// The `addr_format` of shm addresses: opaque binary names (`fi_getname`), which no
/// libfabric format describes, so a provider-specific value. tcp addresses are
/// `FI_SOCKADDR_IN`/`FI_SOCKADDR_IN6`.
pub const ADDR_FORMAT: u32 = sys::FI_PROV_SPECIFIC | 0xfab;

/// Why C hints cannot match any of our infos before the core's filter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoMatch {
    /// A name (provider, fabric or domain) other than ours.
    Name,
    /// An address format other than ours.
    AddrFormat,
    /// An enumeration value the core has no name for.
    Value,
}

/// Whether C string `s` (which may be NULL: unspecified) names us.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string.
unsafe fn names_us(s: *const c_char, ours: &CStr) -> bool {
    if s.is_null() {
        return true;
    }
    // SAFETY: non-NULL, NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(s) };
    s.to_bytes().eq_ignore_ascii_case(ours.to_bytes())
}

/// The bytes of an address field (NULL or zero length: none).
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes.
unsafe fn addr_bytes(p: *const c_void, len: usize) -> Option<Vec<u8>> {
    if p.is_null() || len == 0 {
        None
    } else {
        // SAFETY: the caller's contract.
        Some(unsafe { core::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec())
    }
}

fn enum_of<T>(raw: u32, f: impl Fn(u32) -> Option<T>) -> Result<T, NoMatch> {
    f(raw).ok_or(NoMatch::Value)
}

/// Reads a C `fi_info` into the core's form. `name` is our provider name: a fabric,
/// domain or provider name other than it is [`NoMatch::Name`]; matching names become
/// `core_name` (the core provider's own name), so the core's checks see its own.
///
/// # Safety
/// `c` points to a valid `fi_info` whose non-NULL attribute pointers and strings are
/// valid.
pub unsafe fn info_from_c(
    c: *const sys::fi_info,
    name: &CStr,
    core_name: &'static str,
) -> Result<Info, NoMatch> {
    // SAFETY: the caller's contract.
    let c = unsafe { &*c };
    let mut info = Info {
        caps: Caps::from_bits_retain(c.caps),
        mode: Mode::from_bits_retain(c.mode),
        addr_format: match c.addr_format {
            sys::FI_FORMAT_UNSPEC => AddrFormat::Unspec,
            ADDR_FORMAT => AddrFormat::Proto,
            sys::FI_SOCKADDR => AddrFormat::Sockaddr,
            sys::FI_SOCKADDR_IN => AddrFormat::SockaddrIn,
            sys::FI_SOCKADDR_IN6 => AddrFormat::SockaddrIn6,
            _ => return Err(NoMatch::AddrFormat),
        },
        // SAFETY: the caller's contract covers the address fields.
        src_addr: unsafe { addr_bytes(c.src_addr, c.src_addrlen) },
        // SAFETY: as above.
        dest_addr: unsafe { addr_bytes(c.dest_addr, c.dest_addrlen) },
        ..Info::default()
    };
    // SAFETY: a non-NULL attribute pointer is valid by the caller's contract.
    if let Some(t) = unsafe { c.tx_attr.as_ref() } {
        info.tx_attr = TxAttr {
            caps: Caps::from_bits_retain(t.caps),
            mode: Mode::from_bits_retain(t.mode),
            op_flags: OpFlags::from_bits_retain(t.op_flags),
            msg_order: Order::from_bits_retain(t.msg_order),
            comp_order: Order::from_bits_retain(t.comp_order),
            inject_size: t.inject_size,
            size: t.size,
            iov_limit: t.iov_limit,
            rma_iov_limit: t.rma_iov_limit,
        };
    }
    // SAFETY: a non-NULL attribute pointer is valid by the caller's contract.
    if let Some(r) = unsafe { c.rx_attr.as_ref() } {
        info.rx_attr = RxAttr {
            caps: Caps::from_bits_retain(r.caps),
            mode: Mode::from_bits_retain(r.mode),
            op_flags: OpFlags::from_bits_retain(r.op_flags),
            msg_order: Order::from_bits_retain(r.msg_order),
            comp_order: Order::from_bits_retain(r.comp_order),
            total_buffered_recv: r.total_buffered_recv,
            size: r.size,
            iov_limit: r.iov_limit,
        };
    }
    // SAFETY: a non-NULL attribute pointer is valid by the caller's contract.
    if let Some(e) = unsafe { c.ep_attr.as_ref() } {
        info.ep_attr = EpAttr {
            ep_type: enum_of(e.type_, EpType::from_raw)?,
            protocol: e.protocol,
            protocol_version: e.protocol_version,
            max_msg_size: e.max_msg_size,
            msg_prefix_size: e.msg_prefix_size,
            max_order_raw_size: e.max_order_raw_size,
            max_order_war_size: e.max_order_war_size,
            max_order_waw_size: e.max_order_waw_size,
            mem_tag_format: e.mem_tag_format,
            tx_ctx_cnt: e.tx_ctx_cnt,
            rx_ctx_cnt: e.rx_ctx_cnt,
        };
    }
    // SAFETY: a non-NULL attribute pointer is valid by the caller's contract.
    if let Some(d) = unsafe { c.domain_attr.as_ref() } {
        // SAFETY: the domain name is NULL or a C string by contract.
        if !unsafe { names_us(d.name, name) } {
            return Err(NoMatch::Name);
        }
        info.domain_attr = DomainAttr {
            name: if d.name.is_null() { "" } else { core_name },
            threading: enum_of(d.threading, ThreadingLevel::from_raw)?,
            control_progress: enum_of(d.control_progress, ProgressMode::from_raw)?,
            data_progress: enum_of(d.data_progress, ProgressMode::from_raw)?,
            resource_mgmt: enum_of(d.resource_mgmt, ResourceMgmt::from_raw)?,
            av_type: enum_of(d.av_type, AvKind::from_raw)?,
            mr_mode: MrMode::from_bits_retain(d.mr_mode as u32),
            mr_key_size: d.mr_key_size,
            cq_data_size: d.cq_data_size,
            cq_cnt: d.cq_cnt,
            ep_cnt: d.ep_cnt,
            tx_ctx_cnt: d.tx_ctx_cnt,
            rx_ctx_cnt: d.rx_ctx_cnt,
            max_ep_tx_ctx: d.max_ep_tx_ctx,
            max_ep_rx_ctx: d.max_ep_rx_ctx,
            max_ep_stx_ctx: d.max_ep_stx_ctx,
            max_ep_srx_ctx: d.max_ep_srx_ctx,
            cntr_cnt: d.cntr_cnt,
            mr_iov_limit: d.mr_iov_limit,
            caps: Caps::from_bits_retain(d.caps),
            mode: Mode::from_bits_retain(d.mode),
            mr_cnt: d.mr_cnt,
        };
    }
    // SAFETY: a non-NULL attribute pointer is valid by the caller's contract.
    if let Some(f) = unsafe { c.fabric_attr.as_ref() } {
        // SAFETY: NULL or C strings by contract.
        if !unsafe { names_us(f.name, name) && names_us(f.prov_name, name) } {
            return Err(NoMatch::Name);
        }
        info.fabric_attr = FabricAttr {
            name: if f.name.is_null() { "" } else { core_name },
            prov_name: if f.prov_name.is_null() { "" } else { core_name },
            prov_version: f.prov_version,
            api_version: f.api_version,
        };
    }
    Ok(info)
}

/// C hints as the core's [`Hints`]. A C application that leaves `mode` zero supports no
/// mode bits, so the mode always counts as set.
///
/// # Safety
/// As [`info_from_c`].
pub unsafe fn hints_from_c(
    c: *const sys::fi_info,
    name: &CStr,
    core_name: &'static str,
) -> Result<Hints, NoMatch> {
    Ok(Hints {
        // SAFETY: the caller's contract.
        info: unsafe { info_from_c(c, name, core_name) }?,
        mode_set: true,
    })
}

/// `calloc` of one `T`, or NULL.
fn calloc<T>() -> *mut T {
    // SAFETY: calloc has no preconditions; the result is checked by the callers.
    unsafe { libc::calloc(1, core::mem::size_of::<T>()) }.cast()
}

fn strdup(s: &CStr) -> *mut c_char {
    // SAFETY: `s` is NUL-terminated.
    unsafe { libc::strdup(s.as_ptr()) }
}

fn dup_bytes(b: &Option<Vec<u8>>) -> (*mut c_void, usize) {
    match b {
        Some(b) if !b.is_empty() => {
            // SAFETY: malloc has no preconditions; NULL is checked.
            let p = unsafe { libc::malloc(b.len()) }.cast::<u8>();
            if p.is_null() {
                return (ptr::null_mut(), 0);
            }
            // SAFETY: `p` has room for `b.len()` bytes and does not overlap `b`.
            unsafe { ptr::copy_nonoverlapping(b.as_ptr(), p, b.len()) };
            (p.cast(), b.len())
        }
        _ => (ptr::null_mut(), 0),
    }
}

/// The C form of `info`, with fabric and domain named `name`, allocated so that
/// `fi_freeinfo` releases it; NULL when out of memory (what was allocated is freed).
/// The provider name is left NULL: libfabric sets it (a name already there would be
/// taken for a layered provider's and prefixed to ours).
pub fn info_to_c(info: &Info, name: &CStr) -> *mut sys::fi_info {
    let c = calloc::<sys::fi_info>();
    let tx = calloc::<sys::fi_tx_attr>();
    let rx = calloc::<sys::fi_rx_attr>();
    let ep = calloc::<sys::fi_ep_attr>();
    let dom = calloc::<sys::fi_domain_attr>();
    let fab = calloc::<sys::fi_fabric_attr>();
    let (src, src_len) = dup_bytes(&info.src_addr);
    let (dst, dst_len) = dup_bytes(&info.dest_addr);
    let (dname, fname) = (strdup(name), strdup(name));
    let all = [
        c.cast::<c_void>(),
        tx.cast(),
        rx.cast(),
        ep.cast(),
        dom.cast(),
        fab.cast(),
        dname.cast(),
        fname.cast(),
    ];
    let addrs_ok =
        (info.src_addr.is_none() || !src.is_null()) && (info.dest_addr.is_none() || !dst.is_null());
    if all.iter().any(|p| p.is_null()) || !addrs_ok {
        for p in all.into_iter().chain([src, dst]) {
            // SAFETY: each pointer is NULL or from malloc/calloc/strdup, freed once.
            unsafe { libc::free(p) };
        }
        return ptr::null_mut();
    }
    // SAFETY: every pointer was just allocated (zeroed where calloc'ed) with the size of
    // its type and is exclusively ours until returned.
    unsafe {
        *tx = sys::fi_tx_attr {
            caps: info.tx_attr.caps.bits(),
            mode: info.tx_attr.mode.bits(),
            op_flags: info.tx_attr.op_flags.bits(),
            msg_order: info.tx_attr.msg_order.bits(),
            comp_order: info.tx_attr.comp_order.bits(),
            inject_size: info.tx_attr.inject_size,
            size: info.tx_attr.size,
            iov_limit: info.tx_attr.iov_limit,
            rma_iov_limit: info.tx_attr.rma_iov_limit,
            tclass: 0,
        };
        *rx = sys::fi_rx_attr {
            caps: info.rx_attr.caps.bits(),
            mode: info.rx_attr.mode.bits(),
            op_flags: info.rx_attr.op_flags.bits(),
            msg_order: info.rx_attr.msg_order.bits(),
            comp_order: info.rx_attr.comp_order.bits(),
            total_buffered_recv: info.rx_attr.total_buffered_recv,
            size: info.rx_attr.size,
            iov_limit: info.rx_attr.iov_limit,
        };
        let e = &info.ep_attr;
        *ep = sys::fi_ep_attr {
            type_: e.ep_type.as_raw(),
            protocol: e.protocol,
            protocol_version: e.protocol_version,
            max_msg_size: e.max_msg_size,
            msg_prefix_size: e.msg_prefix_size,
            max_order_raw_size: e.max_order_raw_size,
            max_order_war_size: e.max_order_war_size,
            max_order_waw_size: e.max_order_waw_size,
            mem_tag_format: e.mem_tag_format,
            tx_ctx_cnt: e.tx_ctx_cnt,
            rx_ctx_cnt: e.rx_ctx_cnt,
            auth_key_size: 0,
            auth_key: ptr::null_mut(),
        };
        let d = &info.domain_attr;
        (*dom).name = dname;
        (*dom).threading = d.threading.as_raw();
        (*dom).control_progress = d.control_progress.as_raw();
        (*dom).data_progress = d.data_progress.as_raw();
        (*dom).resource_mgmt = d.resource_mgmt.as_raw();
        (*dom).av_type = d.av_type.as_raw();
        (*dom).mr_mode = d.mr_mode.bits() as i32;
        (*dom).mr_key_size = d.mr_key_size;
        (*dom).cq_data_size = d.cq_data_size;
        (*dom).cq_cnt = d.cq_cnt;
        (*dom).ep_cnt = d.ep_cnt;
        (*dom).tx_ctx_cnt = d.tx_ctx_cnt;
        (*dom).rx_ctx_cnt = d.rx_ctx_cnt;
        (*dom).max_ep_tx_ctx = d.max_ep_tx_ctx;
        (*dom).max_ep_rx_ctx = d.max_ep_rx_ctx;
        (*dom).max_ep_stx_ctx = d.max_ep_stx_ctx;
        (*dom).max_ep_srx_ctx = d.max_ep_srx_ctx;
        (*dom).cntr_cnt = d.cntr_cnt;
        (*dom).mr_iov_limit = d.mr_iov_limit;
        (*dom).caps = d.caps.bits();
        (*dom).mode = d.mode.bits();
        (*dom).mr_cnt = d.mr_cnt;
        (*dom).tclass = 0;
        (*fab).name = fname;
        (*fab).prov_name = ptr::null_mut();
        (*fab).prov_version = info.fabric_attr.prov_version;
        (*fab).api_version = info.fabric_attr.api_version;
        (*c).caps = info.caps.bits();
        (*c).mode = info.mode.bits();
        (*c).addr_format = match info.addr_format {
            AddrFormat::Unspec => sys::FI_FORMAT_UNSPEC,
            AddrFormat::Sockaddr => sys::FI_SOCKADDR,
            AddrFormat::SockaddrIn => sys::FI_SOCKADDR_IN,
            AddrFormat::SockaddrIn6 => sys::FI_SOCKADDR_IN6,
            _ => ADDR_FORMAT,
        };
        (*c).src_addr = src;
        (*c).src_addrlen = src_len;
        (*c).dest_addr = dst;
        (*c).dest_addrlen = dst_len;
        (*c).tx_attr = tx;
        (*c).rx_attr = rx;
        (*c).ep_attr = ep;
        (*c).domain_attr = dom;
        (*c).fabric_attr = fab;
    }
    c
}
