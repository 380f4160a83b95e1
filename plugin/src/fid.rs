//! The objects handed to C: a libfabric `fid_*` header followed by our state, and the
//! table of live objects that makes bad handles from C errors instead of crashes.
//!
//! An object's memory is never freed: closing drops its state and leaves the header, so a
//! second `fi_close` (which libfabric's inline wrapper sends through the header's ops
//! table) reaches our code and gets `-FI_EINVAL`, and a stale handle passed to a bind is
//! refused because it is no longer in the live table. The cost is the header and an
//! empty state slot per object ever opened.

use core::any::TypeId;
use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use fabric::Error;

use crate::sys;

/// The state of one kind of C object: the `fid_*` header it sits behind, its class,
/// and what closing it checks and gives back. The object's `fi_ops` table is made
/// from this ([`head`]), so each kind's close, bind and control are named once.
pub trait Object: Sized + 'static {
    /// What C sees: a `fid_*` struct whose first field is `struct fid`.
    type Hdr: 'static;
    /// Its `FI_CLASS_*`.
    const CLASS: u32;
    /// Its `fi_bind`.
    const BIND: BindFn = no_bind;
    /// Its `fi_control`.
    const CONTROL: ControlFn = no_control;
    /// Whether objects depending on this one are open, so it cannot close
    /// (`-FI_EBUSY`). Kinds that others depend on (those with [`Refs`]) say so here;
    /// nothing depends on the rest.
    fn busy(&self) -> bool {
        false
    }
    /// Gives back, as it closes, the holds it took on other objects.
    fn release(&self);
}

/// The `bind` entry of an `fi_ops` table.
pub type BindFn = unsafe extern "C" fn(*mut sys::fid, *mut sys::fid, u64) -> c_int;
/// The `control` entry of an `fi_ops` table.
pub type ControlFn = unsafe extern "C" fn(*mut sys::fid, c_int, *mut c_void) -> c_int;

/// The `fi_ops` of objects of kind `T`.
const fn fi_ops<T: Object>() -> sys::fi_ops {
    sys::fi_ops {
        size: core::mem::size_of::<sys::fi_ops>(),
        close: Some(close::<T>),
        bind: Some(T::BIND),
        control: Some(T::CONTROL),
        ops_open: Some(no_ops_open),
        tostr: None,
        ops_set: None,
    }
}

/// The `struct fid` that heads the header of a new object of kind `T`.
pub fn head<T: Object>(context: *mut c_void) -> sys::fid {
    sys::fid {
        fclass: T::CLASS as usize,
        context,
        ops: ptr_of(const { &fi_ops::<T>() }),
    }
}

/// A static ops table as the `*mut` a C header stores (C never writes through it).
pub fn ptr_of<O>(t: &'static O) -> *mut O {
    t as *const O as *mut O
}

/// `fi_close` of objects of kind `T`.
unsafe extern "C" fn close<T: Object>(f: *mut sys::fid) -> c_int {
    // SAFETY: called through the ops table of `T`'s objects.
    unsafe { Obj::<T>::close(f) }
}

/// A C-visible object: the header of `T` (whose first field is `struct fid`), then the
/// state, `None` once closed.
#[repr(C)]
pub struct Obj<T: Object> {
    /// What C sees.
    pub hdr: T::Hdr,
    state: UnsafeCell<Option<T>>,
}

/// `-code` of an error, as libfabric returns it.
#[inline]
pub fn neg(e: Error) -> c_int {
    -e.code()
}

/// `0` or the negative error code.
#[inline]
pub fn ret(r: fabric::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => neg(e),
    }
}

/// As [`ret`], for the data calls returning `ssize_t`.
#[inline]
pub fn sret(r: fabric::Result<()>) -> isize {
    ret(r) as isize
}

/// A C timeout in milliseconds, negative for none.
#[inline]
pub fn timeout(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

type Live = HashMap<usize, (u32, TypeId)>;

fn live() -> MutexGuard<'static, Live> {
    static LIVE: OnceLock<Mutex<Live>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

impl<T: Object> Obj<T> {
    /// Allocates the object, records it live, and returns its address (also that of
    /// its `struct fid`).
    pub fn create(hdr: T::Hdr, state: T) -> *mut Obj<T> {
        let p = Box::into_raw(Box::new(Obj {
            hdr,
            state: UnsafeCell::new(Some(state)),
        }));
        live().insert(p as usize, (T::CLASS, TypeId::of::<Obj<T>>()));
        p
    }

    /// [`Obj::create`], handed to C through `out`: the `0` of a successful open.
    ///
    /// # Safety
    /// `out` is non-NULL and writable.
    pub unsafe fn create_into<O>(hdr: T::Hdr, state: T, out: *mut *mut O) -> c_int {
        // SAFETY: the caller's contract.
        unsafe { Self::create_told(hdr, state, out, |_, _| ()) }
    }

    /// [`Obj::create_into`] for objects whose events name them by their C handle:
    /// `tell` gives the new state its handle before C has it.
    ///
    /// # Safety
    /// `out` is non-NULL and writable.
    pub unsafe fn create_told<O>(
        hdr: T::Hdr,
        state: T,
        out: *mut *mut O,
        tell: impl FnOnce(&T, *mut sys::fid),
    ) -> c_int {
        let p = Self::create(hdr, state);
        // SAFETY: just created, live.
        if let Some(s) = unsafe { Self::state(p) } {
            tell(s, p.cast());
        }
        // SAFETY: the caller's contract.
        unsafe { *out = p.cast() };
        0
    }

    /// The state behind `fid`, `None` if `fid` is NULL or closed.
    ///
    /// # Safety
    /// `fid` is NULL or was returned by [`Obj::create`] for this `T` (which the
    /// ops tables guarantee: only this type's tables point at the functions calling
    /// this), and is not being closed concurrently (libfabric forbids that).
    #[inline]
    pub unsafe fn state<'a, F>(fid: *mut F) -> Option<&'a T> {
        let o = fid.cast::<Obj<T>>();
        if o.is_null() {
            return None;
        }
        // SAFETY: the caller's contract: a live or closed (never freed) object whose
        // state slot is only replaced by `close`, not concurrently with this call.
        unsafe { (*(*o).state.get()).as_ref() }
    }

    /// The object behind any `fid` from C, if it is one of ours, live, of `T`'s class
    /// and type `Obj<T>`: how a handle passed as an argument (a CQ to bind) is checked.
    pub fn lookup<'a>(fid: *mut sys::fid) -> Option<&'a T> {
        let known = live().get(&(fid as usize)).copied();
        match known {
            Some((c, t)) if c == T::CLASS && t == TypeId::of::<Obj<T>>() => {
                // SAFETY: the live table says `fid` is an `Obj<T>` from `create`,
                // not closed.
                unsafe { Self::state(fid) }
            }
            _ => None,
        }
    }

    /// `fi_close`: `-FI_EBUSY` while other objects depend on this one
    /// ([`Object::busy`]); otherwise the state is dropped after [`Object::release`].
    ///
    /// # Safety
    /// As [`Obj::state`].
    pub unsafe fn close(fid: *mut sys::fid) -> c_int {
        let mut l = live();
        if fid.is_null() || !l.contains_key(&(fid as usize)) {
            return neg(Error::Inval);
        }
        // SAFETY: live, so created by `create` for this type (the ops table that called
        // us belongs to it).
        let Some(st) = (unsafe { Self::state(fid) }) else {
            return neg(Error::Inval);
        };
        if st.busy() {
            return neg(Error::Busy);
        }
        st.release();
        l.remove(&(fid as usize));
        drop(l);
        let o = fid.cast::<Obj<T>>();
        // SAFETY: no reference into the state outlives this call on the close path, and
        // libfabric forbids using an object concurrently with its close.
        drop(unsafe { (*(*o).state.get()).take() });
        0
    }
}

/// `bind` of objects that bind nothing.
pub unsafe extern "C" fn no_bind(_: *mut sys::fid, _: *mut sys::fid, _: u64) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

/// `control` of objects with no control commands.
pub unsafe extern "C" fn no_control(_: *mut sys::fid, _: c_int, _: *mut c_void) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

/// `fi_open_ops`: we have no extension ops.
pub unsafe extern "C" fn no_ops_open(
    _: *mut sys::fid,
    _: *const c_char,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -(sys::FI_ENOSYS as c_int)
}

/// Counts of objects depending on another one, which cannot close while any is open.
#[derive(Default)]
pub struct Refs(AtomicUsize);

impl Refs {
    /// Whether any object depends on this one.
    pub fn busy(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }
}

/// The counters an object incremented when it was made or bound, decremented when it
/// closes. Each points into an object that cannot close before this one.
#[derive(Default)]
pub(crate) struct Holds(Mutex<Vec<*const Refs>>);

impl Holds {
    /// Holds on `r` alone: what most objects take on the one they are opened on.
    pub(crate) fn on(r: &Refs) -> Self {
        let h = Holds::default();
        h.add(r);
        h
    }

    pub(crate) fn add(&self, r: &Refs) {
        r.0.fetch_add(1, Ordering::AcqRel);
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(r as *const Refs);
    }

    /// [`Holds::add`] unless `r` is held already; returns whether it was added.
    pub(crate) fn add_once(&self, r: &Refs) -> bool {
        let mut l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if l.contains(&(r as *const Refs)) {
            return false;
        }
        r.0.fetch_add(1, Ordering::AcqRel);
        l.push(r as *const Refs);
        true
    }

    /// Gives back one hold on `r`; returns whether there was one.
    pub(crate) fn remove(&self, r: &Refs) -> bool {
        let mut l = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = l.iter().position(|&p| core::ptr::eq(p, r)) else {
            return false;
        };
        l.swap_remove(i);
        r.0.fetch_sub(1, Ordering::AcqRel);
        true
    }

    /// Whether `r` is held: which object a CQ or counter was opened on (compared by
    /// address, never dereferenced).
    pub(crate) fn contains(&self, r: *const Refs) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&r)
    }

    /// How many holds there are.
    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub(crate) fn release(&self) {
        for r in self.0.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            // SAFETY: the object owning `r` is busy while we hold it, so it is open.
            unsafe { (*r).0.fetch_sub(1, Ordering::AcqRel) };
        }
    }
}
