//! `fabric-ofi`: a libfabric provider plugin (`lib<name>-fi.so` exporting `fi_prov_ini`)
//! that puts unmodified libfabric programs on this workspace's providers.
//!
//! libfabric finds the library through `FI_PROVIDER_PATH` (or its provider directory),
//! calls `fi_prov_ini` for the `struct fi_provider`, and sends `fi_getinfo` and
//! `fi_fabric` to it. Everything after that goes straight through the ops tables in the
//! objects we return: `fi_domain` picks one of the static stacks from the info
//! (threading, progress, AV type), and the tables of the domain and of every object
//! opened from it (endpoint, CQ, counter, AV, MR) point at `extern "C"` functions monomorphized for that stack (and, for CQ
//! reads, for the CQ's entry format): one indirect call per operation into the same
//! code a Rust program gets, with no test of the choices behind it.
//!
//! This build exposes the shm provider as `fab_shm` (a name Open MPI does not exclude,
//! unlike those beginning with `shm`). One library exposes one provider: libfabric keys
//! a plugin's provider by the one `fi_provider` its `fi_prov_ini` returns, so each of
//! our providers gets its own `lib<name>-fi.so` file.
//!
//! What it offers: RDM (and DGRAM) endpoints with messages, tagged messages, RMA and
//! atomics, endpoint options; CQs in the four formats with `readfrom`, `readerr`,
//! `sread` and `signal`; counters; table and map AVs; memory registration; EQs on the
//! fabric. Binding EQs, RMA events, triggered operations, scalable endpoints, shared
//! contexts, wait and poll sets and collectives are left out of the capabilities
//! reported and answer `-FI_ENOSYS`.

#![warn(clippy::undocumented_unsafe_blocks)]

use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr;

use fabric::attr::{AvKind, EpType, ProgressMode, ThreadingLevel};
use fabric::av_type::{Map, Table};
use fabric::config::{Auto, Manual, Stack, ThreadDomain, ThreadSafe};
use fabric::cq_format::CqTagged;
use fabric::dynamic::Choice;
use fabric::flags::Caps;
use fabric::info::{self, Hints, Info};
use fabric::{Error, Fabric, Provider};

pub mod convert;
mod eq;
mod fid;
mod nosys;
mod objects;
pub mod sys;

use fid::{neg, Obj};
use objects::Refs;

/// One of our providers as libfabric sees it.
pub trait Exposed {
    /// The provider behind it.
    type P: Provider;
    /// The name libfabric lists (provider, fabric and domain name).
    const NAME: &'static CStr;
    /// The length of an address (`fi_getname`, `fi_av_insert`).
    const ADDR_LEN: usize;
}

/// The provider this library exposes.
pub enum Plugin {}

impl Exposed for Plugin {
    type P = fabric_shm::Shm;
    const NAME: &'static CStr = c"fab_shm";
    const ADDR_LEN: usize = fabric_shm::NAME_LEN;
}

/// The capabilities the plugin implements: messages and tagged messages in both
/// directions, RMA and atomics both ways, directed receives, `FI_SOURCE`,
/// multi-receive buffers, local communication. The core has more (triggers, RMA
/// events, ...), not yet reachable from C.
pub const CAPS: Caps = Caps::MSG
    .union(Caps::TAGGED)
    .union(Caps::RMA)
    .union(Caps::ATOMIC)
    .union(Caps::READ)
    .union(Caps::WRITE)
    .union(Caps::REMOTE_READ)
    .union(Caps::REMOTE_WRITE)
    .union(Caps::SEND)
    .union(Caps::RECV)
    .union(Caps::DIRECTED_RECV)
    .union(Caps::SOURCE)
    .union(Caps::MULTI_RECV)
    .union(Caps::LOCAL_COMM);

/// The provider's version (`FI_VERSION(0, 1)`).
pub const VERSION: u32 = info::version(0, 1);
/// The libfabric API version the plugin is written against (`FI_VERSION(1, 17)`).
pub const FI_VERSION: u32 = info::version(1, 17);

/// The `fi_getinfo` flags we accept.
const GETINFO_FLAGS: u64 = sys::FI_SOURCE | sys::FI_NUMERICHOST | sys::FI_PROV_ATTR_ONLY;

/// Our candidates for `hints`: the provider's, with the threading, progress and AV type
/// of the stack the hints select, and only the capabilities the plugin implements.
pub fn infos(hints: Option<&Hints>) -> fabric::Result<Vec<Info>> {
    let d = hints.map(|h| &h.info.domain_attr);
    let threading = match d.map_or(ThreadingLevel::Unspec, |d| d.threading) {
        ThreadingLevel::Domain | ThreadingLevel::Unspec => ThreadingLevel::Domain,
        _ => ThreadingLevel::Safe,
    };
    let auto = d.is_some_and(|d| {
        d.data_progress == ProgressMode::Auto || d.control_progress == ProgressMode::Auto
    });
    let progress = if auto {
        ProgressMode::Auto
    } else {
        ProgressMode::Manual
    };
    let av_type = match d {
        Some(d) if d.av_type == AvKind::Map => AvKind::Map,
        _ => AvKind::Table,
    };
    let cands: Vec<Info> = <Plugin as Exposed>::P::candidates()
        .into_iter()
        .filter(|c| c.ep_attr.ep_type != EpType::Msg)
        .map(|mut c| {
            c.caps &= CAPS;
            c.tx_attr.caps &= CAPS;
            c.rx_attr.caps &= CAPS;
            c.domain_attr.caps &= CAPS;
            c.domain_attr.threading = threading;
            c.domain_attr.data_progress = progress;
            c.domain_attr.control_progress = progress;
            c.domain_attr.av_type = av_type;
            c.fabric_attr.api_version = FI_VERSION;
            c
        })
        .collect();
    info::filter(&cands, hints)
}

/// An info from the application (one we returned, maybe edited) in the core's form.
///
/// # Safety
/// `c` is a valid `fi_info`.
pub(crate) unsafe fn info_from_app(c: *const sys::fi_info) -> fabric::Result<Info> {
    let name = <Plugin as Exposed>::P::NAME;
    // SAFETY: the caller's contract.
    let mut i = unsafe { convert::info_from_c(c, Plugin::NAME, name) }.map_err(|_| Error::Inval)?;
    i.fabric_attr.prov_name = name;
    i.fabric_attr.name = name;
    i.domain_attr.name = name;
    Ok(i)
}

unsafe extern "C" fn getinfo(
    version: u32,
    _node: *const c_char,
    _service: *const c_char,
    flags: u64,
    hints: *const sys::fi_info,
    out: *mut *mut sys::fi_info,
) -> c_int {
    if out.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: `out` is writable by the provider getinfo contract.
    unsafe { *out = ptr::null_mut() };
    if version >> 16 != 1 || version > FI_VERSION {
        return neg(Error::NoSys);
    }
    if flags & !GETINFO_FLAGS != 0 {
        return neg(Error::BadFlags);
    }
    let h = if hints.is_null() {
        None
    } else {
        // SAFETY: a valid fi_info by fi_getinfo's contract.
        match unsafe { convert::hints_from_c(hints, Plugin::NAME, <Plugin as Exposed>::P::NAME) } {
            Ok(h) => Some(h),
            Err(_) => return neg(Error::NoData),
        }
    };
    // Our addresses are opaque names from fi_getname: node and service name nothing
    // here and are ignored, like libfabric's own shm provider does.
    let list = match infos(h.as_ref()) {
        Ok(l) => l,
        Err(e) => return neg(e),
    };
    let mut head: *mut sys::fi_info = ptr::null_mut();
    for i in list.iter().rev() {
        let c = convert::info_to_c(i, Plugin::NAME);
        if c.is_null() {
            // SAFETY: `head` is a list we built with fi_freeinfo-compatible allocations.
            unsafe { sys::fi_freeinfo(head) };
            return neg(Error::NoMem);
        }
        // SAFETY: `c` was just allocated and is ours.
        unsafe { (*c).next = head };
        head = c;
    }
    // SAFETY: as above.
    unsafe { *out = head };
    0
}

/// The fabric: a name and the count of domains open on it. The core's fabric object
/// is opened with each domain, once the info chose the stack.
pub struct FabricState {
    refs: Refs,
    eqs: Fabric<eq::EqStack>,
}

type FabricObj = Obj<sys::fid_fabric, FabricState>;

static FABRIC_FI_OPS: sys::fi_ops = sys::fi_ops {
    size: core::mem::size_of::<sys::fi_ops>(),
    close: Some(fabric_close),
    bind: Some(objects::no_bind),
    control: Some(objects::no_control),
    ops_open: Some(objects::no_ops_open),
    tostr: None,
    ops_set: None,
};

static FABRIC_OPS: sys::fi_ops_fabric = sys::fi_ops_fabric {
    size: core::mem::size_of::<sys::fi_ops_fabric>(),
    domain: Some(domain_open),
    passive_ep: Some(no_passive_ep),
    eq_open: Some(eq_open),
    wait_open: Some(no_wait_open),
    trywait: Some(no_trywait),
    domain2: None,
};

unsafe extern "C" fn fabric(
    attr: *mut sys::fi_fabric_attr,
    out: *mut *mut sys::fid_fabric,
    context: *mut c_void,
) -> c_int {
    if out.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: NULL or a valid attribute by fi_fabric's contract.
    if let Some(a) = unsafe { attr.as_ref() } {
        let named = |s: *const c_char| {
            s.is_null()
                // SAFETY: a non-NULL name is a C string by fi_fabric's contract.
                || unsafe { CStr::from_ptr(s) }
                    .to_bytes()
                    .eq_ignore_ascii_case(Plugin::NAME.to_bytes())
        };
        if !named(a.name) {
            return neg(Error::NoData);
        }
    }
    let hdr = sys::fid_fabric {
        fid: sys::fid {
            fclass: sys::FI_CLASS_FABRIC as usize,
            context,
            ops: &FABRIC_FI_OPS as *const _ as *mut _,
        },
        ops: &FABRIC_OPS as *const _ as *mut _,
        api_version: FI_VERSION,
    };
    let eqs = match Fabric::<eq::EqStack>::open(&Info::default()) {
        Ok(f) => f,
        Err(e) => return neg(e),
    };
    let st = FabricState {
        refs: Refs::default(),
        eqs,
    };
    // SAFETY: `out` is writable by fi_fabric's contract.
    unsafe { *out = FabricObj::create(hdr, st, sys::FI_CLASS_FABRIC).cast() };
    0
}

unsafe extern "C" fn fabric_close(f: *mut sys::fid) -> c_int {
    // SAFETY: called through the fabric's ops table.
    unsafe { FabricObj::close(f, |s| s.refs.busy(), |_| ()) }
}

/// Opens the domain on the stack `choice` names.
macro_rules! on_stack {
    ($choice:expr, $f:ident ( $($arg:expr),* )) => {{
        type P = <Plugin as Exposed>::P;
        let c: Choice = $choice;
        match (
            c.threading == ThreadingLevel::Safe,
            c.progress == ProgressMode::Auto,
            c.av_type == AvKind::Map,
        ) {
            (false, false, false) => $f::<Stack<P, ThreadDomain, Manual, CqTagged, Table>>($($arg),*),
            (false, false, true) => $f::<Stack<P, ThreadDomain, Manual, CqTagged, Map>>($($arg),*),
            (false, true, false) => $f::<Stack<P, ThreadDomain, Auto, CqTagged, Table>>($($arg),*),
            (false, true, true) => $f::<Stack<P, ThreadDomain, Auto, CqTagged, Map>>($($arg),*),
            (true, false, false) => $f::<Stack<P, ThreadSafe, Manual, CqTagged, Table>>($($arg),*),
            (true, false, true) => $f::<Stack<P, ThreadSafe, Manual, CqTagged, Map>>($($arg),*),
            (true, true, false) => $f::<Stack<P, ThreadSafe, Auto, CqTagged, Table>>($($arg),*),
            (true, true, true) => $f::<Stack<P, ThreadSafe, Auto, CqTagged, Map>>($($arg),*),
        }
    }};
}

unsafe extern "C" fn domain_open(
    f: *mut sys::fid_fabric,
    info: *mut sys::fi_info,
    out: *mut *mut sys::fid_domain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through the fabric's ops table.
    let Some(fab) = (unsafe { FabricObj::state(f) }) else {
        return neg(Error::Inval);
    };
    if info.is_null() || out.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: a valid fi_info by fi_domain's contract.
    let info = match unsafe { info_from_app(info) } {
        Ok(i) => i,
        Err(e) => return neg(e),
    };
    // The info must be one we could have returned: the stack is chosen from it.
    let hints = Hints {
        info: info.clone(),
        mode_set: false,
    };
    let Ok(mut granted) = infos(Some(&hints)) else {
        return neg(Error::NoData);
    };
    let Some(pos) = granted.iter().position(|g| {
        g.ep_attr.ep_type == info.ep_attr.ep_type || info.ep_attr.ep_type == EpType::Unspec
    }) else {
        return neg(Error::NoData);
    };
    let chosen = granted.swap_remove(pos);
    let choice = Choice::from_info(&chosen);
    // SAFETY: `fab.refs` belongs to the live fabric, which stays open (busy) while the
    // domain holds it.
    let r = unsafe { on_stack!(choice, open_domain_on(chosen, &fab.refs, context)) };
    match r {
        Ok(d) => {
            // SAFETY: `out` is writable by fi_domain's contract.
            unsafe { *out = d };
            0
        }
        Err(e) => neg(e),
    }
}

/// [`objects::open_domain`] with the stack as the only type parameter.
///
/// # Safety
/// As [`objects::open_domain`].
unsafe fn open_domain_on<S: objects::St>(
    info: Info,
    parent: &Refs,
    context: *mut c_void,
) -> fabric::Result<*mut sys::fid_domain> {
    // SAFETY: the caller's contract.
    unsafe { objects::open_domain::<S>(info, parent, context) }
}

unsafe extern "C" fn no_passive_ep(
    _: *mut sys::fid_fabric,
    _: *mut sys::fi_info,
    _: *mut *mut sys::fid_pep,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn eq_open(
    f: *mut sys::fid_fabric,
    attr: *mut sys::fi_eq_attr,
    out: *mut *mut sys::fid_eq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through the fabric's ops table.
    match unsafe { FabricObj::state(f) } {
        // SAFETY: fi_eq_open's contract on `attr` and `out`.
        Some(fab) => unsafe { eq::open(&fab.eqs, &fab.refs, attr, out, context) },
        None => neg(Error::Inval),
    }
}
unsafe extern "C" fn no_wait_open(
    _: *mut sys::fid_fabric,
    _: *mut sys::fi_wait_attr,
    _: *mut *mut sys::fid_wait,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}
unsafe extern "C" fn no_trywait(_: *mut sys::fid_fabric, _: *mut *mut sys::fid, _: c_int) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

unsafe extern "C" fn cleanup() {}

/// What `fi_prov_ini` returns. libfabric writes into `context` (its own bookkeeping),
/// so this is a mutable static that only libfabric touches after we hand it out.
static mut PROVIDER: sys::fi_provider = sys::fi_provider {
    version: VERSION,
    fi_version: FI_VERSION,
    context: sys::fi_context {
        internal: [ptr::null_mut(); 4],
    },
    name: c"fab_shm".as_ptr(),
    getinfo: Some(getinfo),
    fabric: Some(fabric),
    cleanup: Some(cleanup),
};

/// The plugin's entry point: libfabric `dlsym`s it and registers what it returns.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut sys::fi_provider {
    ptr::addr_of_mut!(PROVIDER)
}
