//! Poll sets (`fi_poll_open`, `fi_poll_add`, `fi_poll_del`, `fi_poll`) of one domain,
//! on the domain's stack: the core's [`PollSet`], whose members are named by the
//! address of their C handle, so that `fi_poll` can report each one's current
//! `fid->context` and two members with the same context stay apart.
//!
//! A member cannot close while it is in a set (`-FI_EBUSY`), nor the set while it has
//! members, so every address the core set reports is an open handle.

use core::ffi::{c_int, c_void};

use fabric::attr::PollAttr;
use fabric::{Context, Counter, Cq, Error, PollSet};

use crate::fid::{self, neg, ptr_of, Holds, Obj, Object, Refs};
use crate::objects::{completion_of, Completion};
use crate::{objects, sys, St};

/// A poll set.
pub struct PollState<S: St> {
    set: PollSet<S>,
    /// The domain's count of dependents: compared with what a member holds, to
    /// refuse CQs and counters of other domains.
    domain: *const Refs,
    /// The domain.
    holds: Holds,
    /// The members, each held open.
    members: Holds,
}

type PollObj<S> = Obj<PollState<S>>;

impl<S: St> Object for PollState<S> {
    type Hdr = sys::fid_poll;
    const CLASS: u32 = sys::FI_CLASS_POLL;
    fn busy(&self) -> bool {
        self.members.len() != 0
    }
    fn release(&self) {
        self.holds.release()
    }
}

const fn poll_ops<S: St>() -> sys::fi_ops_poll {
    sys::fi_ops_poll {
        size: core::mem::size_of::<sys::fi_ops_poll>(),
        poll: Some(poll::<S>),
        poll_add: Some(poll_add::<S>),
        poll_del: Some(poll_del::<S>),
    }
}

/// `fi_poll_open` on a domain of stack `S`.
///
/// # Safety
/// Called through the domain's ops table (`d` is a domain of stack `S`); `attr` is
/// NULL or valid, `out` NULL or writable.
pub(crate) unsafe extern "C" fn poll_open<S: St>(
    d: *mut sys::fid_domain,
    attr: *mut sys::fi_poll_attr,
    out: *mut *mut sys::fid_poll,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some((domain, refs)) = (unsafe { objects::domain_of::<S>(d) }) else {
        return neg(Error::Inval);
    };
    if out.is_null() {
        return neg(Error::Inval);
    }
    // SAFETY: NULL (defaults) or valid by fi_poll_open's contract.
    if unsafe { attr.as_ref() }.is_some_and(|a| a.flags != 0) {
        return neg(Error::BadFlags);
    }
    let set = match domain.poll_set(&PollAttr::default()) {
        Ok(s) => s,
        Err(e) => return neg(e),
    };
    let st = PollState {
        set,
        domain: refs,
        holds: Holds::on(refs),
        members: Holds::default(),
    };
    let hdr = sys::fid_poll {
        // fi_poll_open takes no context.
        fid: fid::head::<PollState<S>>(core::ptr::null_mut()),
        ops: ptr_of(const { &poll_ops::<S>() }),
    };
    // SAFETY: `out` is non-NULL and writable by fi_poll_open's contract.
    unsafe { PollObj::<S>::create_into(hdr, st, out) }
}

/// The name of a member in the core set.
fn name(fid: *mut sys::fid) -> Context {
    Context(fid as usize)
}

/// Runs `$f::<Q>($args)` with `Q` the CQ or counter of stack `S` that class `$class`
/// names, or gives `-FI_EINVAL` for any other class.
macro_rules! on_member {
    ($class:expr, $f:ident ( $($arg:expr),* )) => {
        match $class {
            sys::FI_CLASS_CQ => $f::<Cq<S>>($($arg),*),
            sys::FI_CLASS_CNTR => $f::<Counter<S>>($($arg),*),
            _ => neg(Error::Inval),
        }
    };
}

/// The checks `fi_poll_add` and `fi_poll_del` make of their arguments: the poll set
/// and the class of the handle.
///
/// # Safety
/// `ps` is NULL or a poll set of stack `S` (its ops table's call); `fid` is NULL or
/// points to a `struct fid`.
unsafe fn args<'a, S: St>(
    ps: *mut sys::fid_poll,
    fid: *mut sys::fid,
    flags: u64,
) -> Result<(&'a PollState<S>, u32), c_int> {
    // SAFETY: the caller's contract.
    let Some(p) = (unsafe { PollObj::<S>::state(ps) }) else {
        return Err(neg(Error::Inval));
    };
    if fid.is_null() {
        return Err(neg(Error::Inval));
    }
    if flags != 0 {
        return Err(neg(Error::BadFlags));
    }
    // SAFETY: non-NULL, and every fid starts with its class (the lookups then check it
    // is really one of ours, of this stack).
    Ok((p, unsafe { (*fid).fclass } as u32))
}

unsafe extern "C" fn poll_add<S: St>(
    ps: *mut sys::fid_poll,
    fid: *mut sys::fid,
    flags: u64,
) -> c_int {
    // SAFETY: called through the poll set's ops table, with a handle from the
    // application.
    match unsafe { args::<S>(ps, fid, flags) } {
        Ok((p, class)) => on_member!(class, add(p, fid)),
        Err(e) => e,
    }
}

/// `fi_poll_add` of the CQ or counter `Q` behind `fid`, which must be of `p`'s domain.
fn add<Q: Completion>(p: &PollState<Q::Stack>, fid: *mut sys::fid) -> c_int {
    let Some(m) = completion_of::<Q>(fid) else {
        return neg(Error::Inval);
    };
    if !m.holds.contains(p.domain) {
        return neg(Error::Inval);
    }
    if !p.members.add_once(&m.refs) {
        return neg(Error::Already);
    }
    m.core.poll_add(&p.set, name(fid));
    0
}

unsafe extern "C" fn poll_del<S: St>(
    ps: *mut sys::fid_poll,
    fid: *mut sys::fid,
    flags: u64,
) -> c_int {
    // SAFETY: called through the poll set's ops table, with a handle from the
    // application.
    match unsafe { args::<S>(ps, fid, flags) } {
        Ok((p, class)) => on_member!(class, del(p, fid)),
        Err(e) => e,
    }
}

/// `fi_poll_del` of the CQ or counter `Q` behind `fid`.
fn del<Q: Completion>(p: &PollState<Q::Stack>, fid: *mut sys::fid) -> c_int {
    let Some(m) = completion_of::<Q>(fid) else {
        return neg(Error::Inval);
    };
    match p.set.del(name(fid)) {
        Ok(()) => {
            p.members.remove(&m.refs);
            0
        }
        Err(e) => neg(e),
    }
}

/// How many contexts `fi_poll` gathers on the stack before copying them out.
const BATCH: usize = 32;

unsafe extern "C" fn poll<S: St>(
    ps: *mut sys::fid_poll,
    context: *mut *mut c_void,
    count: c_int,
) -> c_int {
    // SAFETY: called through the poll set's ops table.
    let Some(p) = (unsafe { PollObj::<S>::state(ps) }) else {
        return neg(Error::Inval);
    };
    let Ok(count) = usize::try_from(count) else {
        return neg(Error::Inval);
    };
    if count > 0 && context.is_null() {
        return neg(Error::Inval);
    }
    // No more than one context per member can come back.
    let count = count.min(p.members.len());
    let mut small = [Context::NULL; BATCH];
    let mut large = Vec::new();
    let out = if count <= BATCH {
        &mut small[..count]
    } else {
        large.resize(count, Context::NULL);
        &mut large[..]
    };
    let n = match p.set.poll(out) {
        Ok(n) => n,
        Err(e) => return neg(e),
    };
    for (i, m) in out[..n].iter().enumerate() {
        let fid = m.0 as *mut sys::fid;
        // SAFETY: a member's handle, open while it is in the set (closing it is
        // refused); `context` holds `count >= n` pointers by fi_poll's contract.
        unsafe { *context.add(i) = (*fid).context };
    }
    n as c_int
}
