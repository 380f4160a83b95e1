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
//! One library serves three providers, chosen by the name it is installed under:
//! `libfab_shm-fi.so` is the shm provider as `fab_shm`, `libfab_tcp-fi.so` the tcp
//! provider as `fab_tcp`, `libfab_hybrid-fi.so` the composed one (shm inside the node,
//! tcp between nodes, chosen per peer at AV insert) as `fab_hybrid` (names Open MPI
//! does not exclude, unlike those beginning with `shm` or `tcp`). libfabric registers
//! one provider per library file (the one `fi_provider` its `fi_prov_ini` returns), so a
//! single build installed under each name gives them all, with no build-time switch.
//! fab_tcp addresses are `FI_SOCKADDR_IN` (or `FI_SOCKADDR_IN6`) names and its infos
//! claim `FI_REMOTE_COMM`; fab_shm's are opaque names and local only; fab_hybrid's are
//! opaque names carrying both halves' and the node's identity, local and remote.
//!
//! What it offers: RDM (and, on shm, DGRAM) endpoints with messages, tagged messages, RMA and
//! atomics, endpoint options; CQs in the four formats with `readfrom`, `readerr`,
//! `sread` and `signal`; counters; table and map AVs; memory registration; EQs on the
//! fabric; wait sets (`fi_wait_open` with `FI_WAIT_UNSPEC`, `FI_WAIT_FD`,
//! `FI_WAIT_MUTEX_COND` or `FI_WAIT_YIELD`, `fi_wait`, `FI_GETWAIT` of the fd,
//! `FI_GETWAITOBJ`) gathering CQs and counters of any stack and EQs opened with
//! `FI_WAIT_SET`, `fi_trywait` on EQs, CQs, counters and wait sets, and poll sets of a
//! domain's CQs and counters; on tcp, MSG and passive endpoints with connection
//! management. RMA events, triggered operations, scalable endpoints, shared contexts,
//! `FI_WAIT_POLLFD` and collectives are left out of the capabilities reported and
//! answer `-FI_ENOSYS`.

#![warn(clippy::undocumented_unsafe_blocks)]

use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr;

use fabric::attr::{AvKind, EpType, ProgressMode, ThreadingLevel};
use fabric::config::Config;
use fabric::dynamic::Choice;
use fabric::flags::Caps;
use fabric::info::{self, Hints, Info};
use fabric::{Error, Fabric, Provider};

mod cm;
mod cmem;
mod connreq;
pub mod convert;
mod eq;
mod fid;
mod nosys;
mod objects;
pub mod sys;

use fid::{neg, ptr_of, Obj, Object, Refs};

/// The stacks the plugin runs on: every one stores tagged completions, which each C
/// CQ format is built from.
pub trait St: Config<Cq = fabric::CqTagged, Provider: Exposed> {}
impl<S: Config<Cq = fabric::CqTagged, Provider: Exposed>> St for S {}

/// One of our providers as libfabric sees it.
pub trait Exposed: Provider {
    /// The name libfabric lists (provider, fabric and domain name), which is also the
    /// file name the library is installed under (`lib<name>-fi.so`).
    const C_NAME: &'static CStr;
    /// The bytes [`Exposed::addr_len`] needs to see of an address.
    const ADDR_HEAD: usize;
    /// The length of the address that starts with `head` (`fi_av_insert` gets a
    /// packed array of addresses and no lengths), or `None` if it names none of ours.
    fn addr_len(head: &[u8]) -> Option<usize>;
    /// Whether `fi_getinfo`'s node and service name addresses of this provider (tcp's
    /// host and port); shm's addresses are opaque names, which they cannot make.
    const NODE_SERVICE: bool;
}

impl Exposed for fabric_shm::Shm {
    const C_NAME: &'static CStr = c"fab_shm";
    const ADDR_HEAD: usize = fabric_shm::NAME_LEN;
    fn addr_len(_: &[u8]) -> Option<usize> {
        Some(fabric_shm::NAME_LEN)
    }
    const NODE_SERVICE: bool = false;
}

impl Exposed for fabric_tcp::Tcp {
    const C_NAME: &'static CStr = c"fab_tcp";
    // A name starts with a `sockaddr_in` or `sockaddr_in6`, whose family says which.
    const ADDR_HEAD: usize = 2;
    fn addr_len(head: &[u8]) -> Option<usize> {
        let family = u16::from_ne_bytes([*head.first()?, *head.get(1)?]);
        match i32::from(family) {
            libc::AF_INET => Some(fabric_tcp::name::NAME4_LEN),
            libc::AF_INET6 => Some(fabric_tcp::name::NAME6_LEN),
            _ => None,
        }
    }
    const NODE_SERVICE: bool = true;
}

impl Exposed for fabric_hybrid::ShmTcp {
    const C_NAME: &'static CStr = c"fab_hybrid";
    // A name's prefix gives the lengths of its three parts.
    const ADDR_HEAD: usize = fabric_hybrid::name::PREFIX_LEN;
    fn addr_len(head: &[u8]) -> Option<usize> {
        fabric_hybrid::name::encoded_len(head)
    }
    const NODE_SERVICE: bool = false;
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
    .union(Caps::LOCAL_COMM)
    .union(Caps::REMOTE_COMM);

/// The provider's version (`FI_VERSION(0, 1)`).
pub const VERSION: u32 = info::version(0, 1);
/// The libfabric API version the plugin is written against (`FI_VERSION(1, 17)`).
pub const FI_VERSION: u32 = info::version(1, 17);

/// The `fi_getinfo` flags we accept.
const GETINFO_FLAGS: u64 = sys::FI_SOURCE | sys::FI_NUMERICHOST | sys::FI_PROV_ATTR_ONLY;

/// Our candidates for `hints`: the provider's, with the threading, progress and AV type
/// of the stack the hints select, and only the capabilities the plugin implements.
pub fn infos<E: Exposed>(hints: Option<&Hints>) -> fabric::Result<Vec<Info>> {
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
    let cands: Vec<Info> = E::candidates()
        .into_iter()
        .map(|mut c| {
            c.caps &= CAPS;
            c.tx_attr.caps &= CAPS;
            c.rx_attr.caps &= CAPS;
            c.domain_attr.caps &= CAPS;
            // Scalable endpoints and shared contexts are not offered through the plugin
            // (fi_scalable_ep, fi_stx_context and fi_srx_context answer -FI_ENOSYS), so
            // an endpoint has one transmit and one receive context and shares none.
            c.domain_attr.max_ep_tx_ctx = 1;
            c.domain_attr.max_ep_rx_ctx = 1;
            c.domain_attr.max_ep_stx_ctx = 0;
            c.domain_attr.max_ep_srx_ctx = 0;
            if c.ep_attr.ep_type == EpType::Msg {
                // MSG endpoints report connection events on EQs opened on the fabric,
                // before any domain chose a stack: they run on the EQs' stack.
                c.domain_attr.threading = ThreadingLevel::Safe;
                c.domain_attr.data_progress = ProgressMode::Manual;
                c.domain_attr.control_progress = ProgressMode::Manual;
                c.domain_attr.av_type = AvKind::Table;
            } else {
                c.domain_attr.threading = threading;
                c.domain_attr.data_progress = progress;
                c.domain_attr.control_progress = progress;
                c.domain_attr.av_type = av_type;
            }
            c.fabric_attr.api_version = FI_VERSION;
            c
        })
        .collect();
    info::filter(&cands, hints)
}

/// An info from the application (one we returned, maybe edited, or one of an
/// `FI_CONNREQ` event) in the core's form.
///
/// # Safety
/// `c` is a valid `fi_info`.
pub(crate) unsafe fn info_from_app<E: Exposed>(c: *const sys::fi_info) -> fabric::Result<Info> {
    let name = <E as Provider>::NAME;
    // SAFETY: the caller's contract.
    let mut i = unsafe { convert::info_from_c(c, E::C_NAME, name) }.map_err(|_| Error::Inval)?;
    // SAFETY: as above.
    let handle = unsafe { (*c).handle };
    if !handle.is_null() {
        // The connection request of an FI_CONNREQ event, or nothing of ours.
        i.handle = Some(connreq::request(handle).ok_or(Error::Inval)?);
    }
    i.fabric_attr.prov_name = name;
    i.fabric_attr.name = name;
    i.domain_attr.name = name;
    Ok(i)
}

unsafe extern "C" fn getinfo<E: Exposed>(
    version: u32,
    node: *const c_char,
    service: *const c_char,
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
        match unsafe { convert::hints_from_c(hints, E::C_NAME, <E as Provider>::NAME) } {
            Ok(h) => Some(h),
            Err(_) => return neg(Error::NoData),
        }
    };
    let mut list = match infos::<E>(h.as_ref()) {
        Ok(l) => l,
        Err(e) => return neg(e),
    };
    // shm addresses are opaque names from fi_getname: node and service name nothing
    // there and are ignored, like libfabric's own shm provider does. tcp's name a host
    // and port: the local one with FI_SOURCE or without a node, else a peer's.
    let text = |p: *const c_char| {
        // SAFETY: NULL or a C string by fi_getinfo's contract.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let (node, service) = (text(node), text(service));
    if E::NODE_SERVICE && (node.is_some() || service.is_some()) {
        let (n, svc) = (
            node.as_deref().unwrap_or(""),
            service.as_deref().unwrap_or(""),
        );
        let source = flags & sys::FI_SOURCE != 0 || node.is_none();
        let addr = if source {
            E::source_from_svc(n, svc)
        } else {
            E::name_from_svc(n, svc)
        };
        let addr = match addr {
            Ok(a) => a,
            Err(e) => return neg(e),
        };
        for i in &mut list {
            if source {
                i.src_addr = Some(addr.clone());
            } else {
                i.dest_addr = Some(addr.clone());
            }
        }
    }
    let mut head: *mut sys::fi_info = ptr::null_mut();
    for i in list.iter().rev() {
        let c = convert::info_to_c(i, E::C_NAME);
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
pub struct FabricState<E: Exposed> {
    pub(crate) refs: Refs,
    pub(crate) eqs: Fabric<eq::EqStack<E>>,
}

pub(crate) type FabricObj<E> = Obj<FabricState<E>>;

impl<E: Exposed> Object for FabricState<E> {
    type Hdr = sys::fid_fabric;
    const CLASS: u32 = sys::FI_CLASS_FABRIC;
    fn busy(&self) -> bool {
        self.refs.busy()
    }
    /// A fabric is opened on nothing.
    fn release(&self) {}
}

const fn fabric_ops<E: Exposed>() -> sys::fi_ops_fabric {
    sys::fi_ops_fabric {
        size: core::mem::size_of::<sys::fi_ops_fabric>(),
        domain: Some(domain_open::<E>),
        passive_ep: Some(cm::pep_open::<E>),
        eq_open: Some(eq_open::<E>),
        wait_open: Some(objects::waitset::wait_open::<E>),
        trywait: Some(objects::waitset::trywait::<E>),
        domain2: None,
    }
}

unsafe extern "C" fn fabric<E: Exposed>(
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
                    .eq_ignore_ascii_case(E::C_NAME.to_bytes())
        };
        if !named(a.name) {
            return neg(Error::NoData);
        }
    }
    let hdr = sys::fid_fabric {
        fid: fid::head::<FabricState<E>>(context),
        ops: ptr_of(const { &fabric_ops::<E>() }),
        api_version: FI_VERSION,
    };
    let eqs = match Fabric::<eq::EqStack<E>>::open(&Info::default()) {
        Ok(f) => f,
        Err(e) => return neg(e),
    };
    let st = FabricState {
        refs: Refs::default(),
        eqs,
    };
    // SAFETY: `out` is non-NULL and writable by fi_fabric's contract.
    unsafe { FabricObj::<E>::create_into(hdr, st, out) }
}

/// Which of a provider's 8 stacks: thread-safe (else `FI_THREAD_DOMAIN`), auto progress
/// (else manual), map AV (else table).
pub(crate) type StackKey = (bool, bool, bool);

/// The key of the stack `choice` names.
fn stack_key(c: &Choice) -> StackKey {
    (
        c.threading == ThreadingLevel::Safe,
        c.progress == ProgressMode::Auto,
        c.av_type == AvKind::Map,
    )
}

/// Every [`StackKey`].
pub(crate) fn stack_keys() -> impl Iterator<Item = StackKey> {
    (0..8u8).map(|i| (i & 4 != 0, i & 2 != 0, i & 1 != 0))
}

/// Evaluates `$f::<S>($args)` with `S` the stack of provider `$p` that `$key` (a
/// [`StackKey`]) names: the one place the stacks are listed.
macro_rules! on_stack {
    ($p:ty, $key:expr, $f:ident ( $($arg:expr),* )) => {{
        use fabric::av_type::{Map, Table};
        use fabric::config::{Auto, Manual, Stack, ThreadDomain, ThreadSafe};
        use fabric::cq_format::CqTagged;
        let key: $crate::StackKey = $key;
        match key {
            (false, false, false) => $f::<Stack<$p, ThreadDomain, Manual, CqTagged, Table>>($($arg),*),
            (false, false, true) => $f::<Stack<$p, ThreadDomain, Manual, CqTagged, Map>>($($arg),*),
            (false, true, false) => $f::<Stack<$p, ThreadDomain, Auto, CqTagged, Table>>($($arg),*),
            (false, true, true) => $f::<Stack<$p, ThreadDomain, Auto, CqTagged, Map>>($($arg),*),
            (true, false, false) => $f::<Stack<$p, ThreadSafe, Manual, CqTagged, Table>>($($arg),*),
            (true, false, true) => $f::<Stack<$p, ThreadSafe, Manual, CqTagged, Map>>($($arg),*),
            (true, true, false) => $f::<Stack<$p, ThreadSafe, Auto, CqTagged, Table>>($($arg),*),
            (true, true, true) => $f::<Stack<$p, ThreadSafe, Auto, CqTagged, Map>>($($arg),*),
        }
    }};
}
pub(crate) use on_stack;

/// The checks `fi_domain` and `fi_passive_ep` make of their arguments: the fabric
/// behind `f`, and `info` in the core's form; `Err` is the C error.
///
/// # Safety
/// `f` is NULL or a fabric of provider `E` (its ops table's call); `info` is NULL or
/// a valid `fi_info`.
pub(crate) unsafe fn open_on_fabric<'a, E: Exposed, O>(
    f: *mut sys::fid_fabric,
    info: *const sys::fi_info,
    out: *mut *mut O,
) -> Result<(&'a FabricState<E>, Info), c_int> {
    // SAFETY: the caller's contract.
    let Some(fab) = (unsafe { FabricObj::<E>::state(f) }) else {
        return Err(neg(Error::Inval));
    };
    if info.is_null() || out.is_null() {
        return Err(neg(Error::Inval));
    }
    // SAFETY: as above.
    match unsafe { info_from_app::<E>(info) } {
        Ok(i) => Ok((fab, i)),
        Err(e) => Err(neg(e)),
    }
}

unsafe extern "C" fn domain_open<E: Exposed>(
    f: *mut sys::fid_fabric,
    info: *mut sys::fi_info,
    out: *mut *mut sys::fid_domain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through the fabric's ops table, with fi_domain's arguments.
    let (fab, info) = match unsafe { open_on_fabric::<E, _>(f, info, out) } {
        Ok(a) => a,
        Err(e) => return e,
    };
    // The info must be one we could have returned: the stack is chosen from it.
    let hints = Hints {
        info: info.clone(),
        mode_set: false,
    };
    let Ok(mut granted) = infos::<E>(Some(&hints)) else {
        return neg(Error::NoData);
    };
    let Some(pos) = granted.iter().position(|g| {
        g.ep_attr.ep_type == info.ep_attr.ep_type || info.ep_attr.ep_type == EpType::Unspec
    }) else {
        return neg(Error::NoData);
    };
    let chosen = granted.swap_remove(pos);
    let mut choice = Choice::from_info(&chosen);
    if chosen.ep_attr.ep_type == EpType::Msg {
        // MSG endpoints run on the stack of the fabric's EQs, which report their
        // connection events: thread-safe (stronger than any level asked for), manual
        // progress (the only one MSG infos offer), the AV type unused without an AV.
        choice.threading = ThreadingLevel::Safe;
        choice.progress = ProgressMode::Manual;
        choice.av_type = AvKind::Table;
    }
    // SAFETY: `fab.refs` belongs to the live fabric, which stays open (busy) while the
    // domain holds it.
    let r = unsafe {
        on_stack!(
            E,
            stack_key(&choice),
            open_domain_on(chosen, &fab.refs, context)
        )
    };
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
unsafe fn open_domain_on<S: St>(
    info: Info,
    parent: &Refs,
    context: *mut c_void,
) -> fabric::Result<*mut sys::fid_domain> {
    // SAFETY: the caller's contract.
    unsafe { objects::open_domain::<S>(info, parent, context) }
}

unsafe extern "C" fn eq_open<E: Exposed>(
    f: *mut sys::fid_fabric,
    attr: *mut sys::fi_eq_attr,
    out: *mut *mut sys::fid_eq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: called through the fabric's ops table.
    match unsafe { FabricObj::<E>::state(f) } {
        // SAFETY: fi_eq_open's contract on `attr` and `out`.
        Some(fab) => unsafe {
            eq::open(&fab.refs, attr, out, context, |ea, wait_set| {
                let set =
                    objects::waitset::named(ea.wait_obj, wait_set).map_err(|()| Error::Inval)?;
                Ok(match set {
                    Some(w) => {
                        let (eq, place) = w.join_eq(&fab.eqs, ea)?;
                        eq::Core {
                            eq,
                            set: Some((Box::new(place), &w.refs)),
                        }
                    }
                    None => eq::Core {
                        eq: fab.eqs.eq(ea)?,
                        set: None,
                    },
                })
            })
        },
        None => neg(Error::Inval),
    }
}

unsafe extern "C" fn cleanup() {}

/// The `struct fi_provider` of provider `E`.
const fn provider<E: Exposed>() -> sys::fi_provider {
    sys::fi_provider {
        version: VERSION,
        fi_version: FI_VERSION,
        context: sys::fi_context {
            internal: [ptr::null_mut(); 4],
        },
        name: E::C_NAME.as_ptr(),
        getinfo: Some(getinfo::<E>),
        fabric: Some(fabric::<E>),
        cleanup: Some(cleanup),
    }
}

/// What `fi_prov_ini` returns, one per provider. libfabric writes into `context` (its
/// own bookkeeping), so these are mutable statics that only libfabric touches after we
/// hand one out.
static mut SHM: sys::fi_provider = provider::<fabric_shm::Shm>();
static mut TCP: sys::fi_provider = provider::<fabric_tcp::Tcp>();
static mut HYBRID: sys::fi_provider = provider::<fabric_hybrid::ShmTcp>();

/// The name this library was loaded under, from `lib<name>-fi.so`.
fn installed_name() -> Option<String> {
    // SAFETY: all-zero is a valid `Dl_info` (null pointers), filled in by dladdr.
    let mut dl: libc::Dl_info = unsafe { core::mem::zeroed() };
    let here = fi_prov_ini as *const c_void;
    // SAFETY: `here` is an address inside this library and `dl` is writable.
    if unsafe { libc::dladdr(here, &mut dl) } == 0 || dl.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path that lives as long as the mapping.
    let path = unsafe { CStr::from_ptr(dl.dli_fname) }.to_str().ok()?;
    let file = path.rsplit('/').next()?;
    Some(file.strip_prefix("lib")?.strip_suffix("-fi.so")?.to_owned())
}

/// The plugin's entry point: libfabric `dlsym`s it and registers what it returns.
///
/// One library serves every provider: it answers as the provider whose name it was
/// installed under (`libfab_shm-fi.so`, `libfab_tcp-fi.so`, `libfab_hybrid-fi.so`;
/// libfabric registers one
/// provider per library file), and returns NULL (nothing registered) under any other
/// name.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut sys::fi_provider {
    let name = installed_name();
    let is = |n: &CStr| name.as_deref().map(str::as_bytes) == Some(n.to_bytes());
    if is(<fabric_tcp::Tcp as Exposed>::C_NAME) {
        ptr::addr_of_mut!(TCP)
    } else if is(<fabric_shm::Shm as Exposed>::C_NAME) {
        ptr::addr_of_mut!(SHM)
    } else if is(<fabric_hybrid::ShmTcp as Exposed>::C_NAME) {
        ptr::addr_of_mut!(HYBRID)
    } else {
        eprintln!(
            "fabric-ofi: loaded as {name:?}; install it as libfab_shm-fi.so, \
             libfab_tcp-fi.so or libfab_hybrid-fi.so"
        );
        ptr::null_mut()
    }
}
