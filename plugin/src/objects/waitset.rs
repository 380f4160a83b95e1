//! Wait sets (`fi_wait_open`, `fi_wait`, `FI_GETWAIT`) and `fi_trywait`.
//!
//! A wait set is opened on the fabric, before any domain chose a stack, and may later
//! gather CQs and counters of domains on different stacks, and EQs (on the fabric's EQ
//! stack). So the C object owns only what is stack-independent: the wait object (a [`Waiter`], e.g. the pipe behind
//! `FI_GETWAIT`). The core's [`WaitSet<S>`] of a stack is made on the first CQ or
//! counter of that stack opened with `FI_WAIT_SET`, sharing that wait object
//! ([`WaitSet::sharing`]): every member signals the one waiter, whatever its stack,
//! and `fi_wait` looks at the sets of all stacks. A CQ or counter not in a set has no
//! part in any of this: its data path is the core's, unchanged.
//!
//! `fi_wait`, `fi_trywait` and `fi_poll` progress the domains of their members (under
//! manual progress): for an `FI_THREAD_DOMAIN` domain they count as calls on that
//! domain, which the application serializes with its other calls there.

use core::any::Any;
use core::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fabric::attr::{EqAttr, WaitObj};
use fabric::config::Config;
use fabric::waitobj::Waiter;
use fabric::{Counter, Cq, Domain, Error, EventQueue, Fabric, WaitSet, Waitable};

use crate::fid::{self, neg, ptr_of, ControlFn, Holds, Obj, Object, Refs};
use crate::objects::{completion_of, Completion};
use crate::{on_stack, stack_keys, sys, Exposed, FabricObj, St};

/// How long `fi_wait` sleeps before looking again: under manual progress nothing
/// completes (and nothing signals the set) unless someone drives progress, which the
/// look does. The core's own `WaitSet::wait` slices its sleep the same way.
const SLICE: Duration = Duration::from_millis(2);

/// A core wait set of some stack, behind one interface.
trait StackSet {
    /// Whether a member has events (after one progress pass under manual progress).
    fn ready(&self) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<S: Config> StackSet for WaitSet<S> {
    fn ready(&self) -> bool {
        // A wait with no time left looks once and sleeps not at all.
        self.wait(Some(Duration::ZERO)).is_ok()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// What a wait set and its members share: the wait object, and one core set per stack
/// of the members.
struct Shared {
    waiter: Arc<Waiter>,
    /// Every use of a core set goes through this lock, so a set of an unlocked
    /// (`FI_THREAD_DOMAIN`) stack is never touched by two threads at once from here.
    sets: Mutex<Vec<Box<dyn StackSet>>>,
}

impl Shared {
    fn sets(&self) -> MutexGuard<'_, Vec<Box<dyn StackSet>>> {
        self.sets.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ready(&self) -> bool {
        self.sets().iter().any(|s| s.ready())
    }

    /// Runs `f` on the core set of stack `S`, made (on the shared waiter) if none yet.
    fn with_set<S: Config, R>(
        &self,
        f: impl FnOnce(&WaitSet<S>) -> fabric::Result<R>,
    ) -> fabric::Result<R> {
        let mut sets = self.sets();
        let pos = sets
            .iter()
            .position(|s| s.as_any().downcast_ref::<WaitSet<S>>().is_some());
        let i = match pos {
            Some(i) => i,
            None => {
                sets.push(Box::new(WaitSet::<S>::sharing(self.waiter.clone())?));
                sets.len() - 1
            }
        };
        match sets[i].as_any().downcast_ref::<WaitSet<S>>() {
            Some(set) => f(set),
            // Found or made as a `WaitSet<S>` just above.
            None => Err(Error::Inval),
        }
    }
}

/// What a wait set gathers: CQs, counters and EQs, each of some stack.
pub(crate) trait Member {
    /// Its stack.
    type Stack: Config;
    /// Takes it out of wait set `set`.
    fn leave(&self, set: &WaitSet<Self::Stack>);
}

impl<Q: Completion> Member for Q {
    type Stack = Q::Stack;
    fn leave(&self, set: &WaitSet<Q::Stack>) {
        self.detach(set)
    }
}

impl<S: Config> Member for EventQueue<S> {
    type Stack = S;
    fn leave(&self, set: &WaitSet<S>) {
        set.detach_eq(self)
    }
}

/// A CQ's, counter's or EQ's place in a wait set, held in its state: dropped when the
/// object closes, it takes the object out of the core set, so that a closed CQ's
/// entries no longer wake the set.
pub(crate) struct InSet<M: Member> {
    shared: Arc<Shared>,
    member: M,
}

impl<M: Member> Drop for InSet<M> {
    fn drop(&mut self) {
        let _ = self.shared.with_set::<M::Stack, ()>(|set| {
            self.member.leave(set);
            Ok(())
        });
    }
}

/// A wait set.
pub struct WaitState {
    shared: Arc<Shared>,
    /// The wait object asked for (`FI_GETWAITOBJ`).
    kind: WaitObj,
    /// The CQs and counters bound to the set, which cannot outlive it.
    pub(crate) refs: Refs,
    /// The fabric.
    holds: Holds,
}

type WaitObjOf = Obj<WaitState>;

impl Object for WaitState {
    type Hdr = sys::fid_wait;
    const CLASS: u32 = sys::FI_CLASS_WAIT;
    const CONTROL: ControlFn = wait_control;
    fn busy(&self) -> bool {
        self.refs.busy()
    }
    fn release(&self) {
        self.holds.release()
    }
}

impl WaitState {
    /// `fi_cq_open` or `fi_cntr_open` with `FI_WAIT_SET` on this set.
    pub(crate) fn join<Q: Completion>(
        &self,
        domain: &Domain<Q::Stack>,
        attr: &Q::Attr,
    ) -> fabric::Result<(Q, InSet<Q>)> {
        let q = self
            .shared
            .with_set::<Q::Stack, _>(|set| Q::open_in(domain, attr, set))?;
        let member = q.clone();
        Ok((
            q,
            InSet {
                shared: self.shared.clone(),
                member,
            },
        ))
    }

    /// `fi_eq_open` with `FI_WAIT_SET` on this set.
    pub(crate) fn join_eq<S: Config>(
        &self,
        fabric: &Fabric<S>,
        attr: &EqAttr,
    ) -> fabric::Result<(EventQueue<S>, InSet<EventQueue<S>>)> {
        let eq = self
            .shared
            .with_set::<S, _>(|set| fabric.eq_in_set(attr, set))?;
        let place = InSet {
            shared: self.shared.clone(),
            member: eq.clone(),
        };
        Ok((eq, place))
    }

    /// `fi_trywait` on the set: its wait object is cleared (its fd drained), then
    /// `-FI_EAGAIN` if a member has events, which the application processes before it
    /// blocks. In this order an event that comes after the look signals the wait
    /// object again.
    ///
    /// A member's signal during the look also gives `-FI_EAGAIN`: a CQ found empty
    /// clears the shared wait object, which may drain the readiness another member's
    /// new completion (from a progress thread) just raised.
    fn trywait(&self) -> c_int {
        let waiter = &self.shared.waiter;
        let token = waiter.prepare();
        waiter.clear();
        if self.shared.ready() || waiter.wait(token, Some(Duration::ZERO)).is_ok() {
            neg(Error::Again)
        } else {
            0
        }
    }
}

/// The wait set behind `fid` (the `wait_set` of a CQ or counter attribute), if it is
/// one of ours and open.
pub(crate) fn lookup<'a>(fid: *mut sys::fid_wait) -> Option<&'a WaitState> {
    WaitObjOf::lookup(fid.cast())
}

/// The wait set a CQ, counter or EQ attribute names: with `FI_WAIT_SET` the one behind
/// `wait_set` (`Err` if that is none of ours); none otherwise, as fi_cq(3), fi_cntr(3)
/// and fi_eq(3) ignore `wait_set` then.
pub(crate) fn named<'a>(
    wait_obj: WaitObj,
    wait_set: *mut sys::fid_wait,
) -> Result<Option<&'a WaitState>, ()> {
    match wait_obj {
        WaitObj::Set => lookup(wait_set).map(Some).ok_or(()),
        _ => Ok(None),
    }
}

const WAIT_OPS: sys::fi_ops_wait = sys::fi_ops_wait {
    size: core::mem::size_of::<sys::fi_ops_wait>(),
    wait: Some(wait),
};

/// `fi_wait_open` on fabric `E`.
pub(crate) unsafe extern "C" fn wait_open<E: Exposed>(
    f: *mut sys::fid_fabric,
    attr: *mut sys::fi_wait_attr,
    out: *mut *mut sys::fid_wait,
) -> c_int {
    // SAFETY: called through the fabric's ops table.
    let Some(fab) = (unsafe { FabricObj::<E>::state(f) }) else {
        return neg(Error::Inval);
    };
    // SAFETY: NULL or a valid attribute by fi_wait_open's contract.
    let (Some(a), false) = (unsafe { attr.as_ref() }, out.is_null()) else {
        return neg(Error::Inval);
    };
    if a.flags != 0 {
        return neg(Error::BadFlags);
    }
    let kind = match WaitObj::from_raw(a.wait_obj) {
        // The kinds fi_poll(3) lists for wait sets.
        Some(k @ (WaitObj::Unspec | WaitObj::Fd | WaitObj::MutexCond | WaitObj::Yield)) => k,
        // A set of nothing, or of a set.
        Some(WaitObj::None | WaitObj::Set) => return neg(Error::Inval),
        // FI_WAIT_POLLFD (several descriptors) is not offered.
        None if a.wait_obj == sys::FI_WAIT_POLLFD => return neg(Error::NoSys),
        None => return neg(Error::Inval),
    };
    let waiter = match Waiter::new(kind) {
        Ok(w) => Arc::new(w),
        Err(e) => return neg(e),
    };
    // Shared with the members' handles, which C may close from any thread: hence an
    // `Arc`, though the core sets of `FI_THREAD_DOMAIN` stacks inside are neither Send
    // nor Sync. They are only reached under `sets`' lock, and the stacks' objects
    // under the application's threading contract, as every object of the plugin.
    #[allow(clippy::arc_with_non_send_sync)]
    let shared = Arc::new(Shared {
        waiter,
        sets: Mutex::new(Vec::new()),
    });
    let st = WaitState {
        shared,
        kind,
        refs: Refs::default(),
        holds: Holds::on(&fab.refs),
    };
    let hdr = sys::fid_wait {
        // fi_wait_open takes no context.
        fid: fid::head::<WaitState>(core::ptr::null_mut()),
        ops: ptr_of(&WAIT_OPS),
    };
    // SAFETY: `out` is non-NULL and writable by fi_wait_open's contract.
    unsafe { WaitObjOf::create_into(hdr, st, out) }
}

unsafe extern "C" fn wait_control(f: *mut sys::fid, cmd: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: called through the wait set's ops table.
    let Some(w) = (unsafe { WaitObjOf::state(f) }) else {
        return neg(Error::Inval);
    };
    match cmd as u32 {
        sys::FI_GETWAIT | sys::FI_GETWAITOBJ if arg.is_null() => neg(Error::Inval),
        sys::FI_GETWAIT => match (w.kind, w.shared.waiter.fd()) {
            (WaitObj::Fd, Some(fd)) => {
                // SAFETY: FI_GETWAIT on an FI_WAIT_FD set takes an `int *`.
                unsafe { *arg.cast::<c_int>() = fd };
                0
            }
            // Ours is a Rust mutex and condition variable, not the pthread pair
            // `struct fi_mutex_cond` names.
            (WaitObj::MutexCond, _) => neg(Error::NoSys),
            // FI_WAIT_UNSPEC and FI_WAIT_YIELD have no object to hand out.
            _ => neg(Error::Inval),
        },
        sys::FI_GETWAITOBJ => {
            // SAFETY: FI_GETWAITOBJ takes an `enum fi_wait_obj *`.
            unsafe { *arg.cast::<sys::fi_wait_obj>() = w.kind.as_raw() };
            0
        }
        _ => neg(Error::NoSys),
    }
}

/// `fi_wait`: 0 once a member has events, `-FI_ETIMEDOUT` after `timeout` ms
/// (negative: no limit).
unsafe extern "C" fn wait(ws: *mut sys::fid_wait, timeout: c_int) -> c_int {
    // SAFETY: called through the wait set's ops table.
    let Some(w) = (unsafe { WaitObjOf::state(ws) }) else {
        return neg(Error::Inval);
    };
    let deadline = u64::try_from(timeout).map(|ms| Instant::now() + Duration::from_millis(ms));
    let waiter = &w.shared.waiter;
    loop {
        // Registered before the look: a member's signal after it ends the sleep.
        let token = waiter.prepare();
        if w.shared.ready() {
            return 0;
        }
        let slice = match deadline {
            Err(_) => SLICE,
            Ok(d) => {
                let now = Instant::now();
                if now >= d {
                    return neg(Error::TimedOut);
                }
                (d - now).min(SLICE)
            }
        };
        match waiter.wait(token, Some(slice)) {
            Ok(()) | Err(Error::Again) => {}
            Err(e) => return neg(e),
        }
    }
}

/// `fi_trywait` on one CQ or counter (by `class`) of stack `S`, if `fid` is one.
fn completion_trywait<S: St>(fid: *mut sys::fid, class: u32) -> Option<fabric::Result<()>> {
    fn on<Q: Completion>(fid: *mut sys::fid) -> Option<fabric::Result<()>> {
        completion_of::<Q>(fid).map(|c| c.core.trywait())
    }
    match class {
        sys::FI_CLASS_CQ => on::<Cq<S>>(fid),
        sys::FI_CLASS_CNTR => on::<Counter<S>>(fid),
        _ => None,
    }
}

/// `fi_trywait` on one handle: 0, `-FI_EAGAIN`, or `-FI_EINVAL` for anything that is
/// not an open EQ, CQ, counter or wait set of ours.
///
/// # Safety
/// `fid` is NULL or points to a `struct fid`.
unsafe fn trywait_one<E: Exposed>(fid: *mut sys::fid) -> c_int {
    if fid.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: non-NULL, and every fid starts with its class (the lookups then check it
    // is really one of ours).
    let class = unsafe { (*fid).fclass } as u32;
    let r = match class {
        sys::FI_CLASS_WAIT => return lookup(fid.cast()).map_or(neg(Error::Inval), |w| w.trywait()),
        sys::FI_CLASS_EQ => crate::eq::lookup::<crate::eq::EqStack<E>>(fid).map(Waitable::trywait),
        // The stack of a CQ or counter is the one whose lookup finds it.
        sys::FI_CLASS_CQ | sys::FI_CLASS_CNTR => {
            stack_keys().find_map(|k| on_stack!(E, k, completion_trywait(fid, class)))
        }
        _ => None,
    };
    match r {
        Some(Ok(())) => 0,
        Some(Err(e)) => neg(e),
        None => neg(Error::Inval),
    }
}

/// `fi_trywait` on fabric `E`: 0 when it is safe to block on the wait objects of all
/// `count` handles, else the first handle's error (`-FI_EAGAIN`: events are there).
pub(crate) unsafe extern "C" fn trywait<E: Exposed>(
    f: *mut sys::fid_fabric,
    fids: *mut *mut sys::fid,
    count: c_int,
) -> c_int {
    // SAFETY: called through the fabric's ops table.
    if unsafe { FabricObj::<E>::state(f) }.is_none() {
        return neg(Error::Inval);
    }
    let Ok(n) = usize::try_from(count) else {
        return neg(Error::Inval);
    };
    if n > 0 && fids.is_null() {
        return neg(Error::Inval);
    }
    for i in 0..n {
        // SAFETY: `fids` holds `count` handles by fi_trywait's contract.
        let fid = unsafe { *fids.add(i) };
        // SAFETY: a handle from the application: NULL or a `struct fid`.
        let r = unsafe { trywait_one::<E>(fid) };
        if r != 0 {
            return r;
        }
    }
    0
}
