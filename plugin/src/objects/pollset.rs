//! Poll sets (`fi_poll_open`, `fi_poll_add`, `fi_poll_del`, `fi_poll`) of one domain,
//! on the domain's stack: the core's [`PollSet`], whose members are named by the
//! address of their C handle, so that `fi_poll` can report each one's current
//! `fid->context` and two members with the same context stay apart.
//!
//! A member cannot close while it is in a set (`-FI_EBUSY`), nor the set while it has
//! members, so every address the core set reports is an open handle.

use core::ffi::{c_int, c_void};

use fabric::attr::PollAttr;
use fabric::{Context, Error, PollSet};

use crate::fid::{neg, no_bind, no_control, no_ops_open, Holds, Obj, Refs};
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

type PollObj<S> = Obj<sys::fid_poll, PollState<S>>;

const fn poll_fi_ops<S: St>() -> sys::fi_ops {
    sys::fi_ops {
        size: core::mem::size_of::<sys::fi_ops>(),
        close: Some(poll_close::<S>),
        bind: Some(no_bind),
        control: Some(no_control),
        ops_open: Some(no_ops_open),
        tostr: None,
        ops_set: None,
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
        holds: Holds::default(),
        members: Holds::default(),
    };
    st.holds.add(refs);
    let hdr = sys::fid_poll {
        fid: sys::fid {
            fclass: sys::FI_CLASS_POLL as usize,
            // fi_poll_open takes no context.
            context: core::ptr::null_mut(),
            ops: const { &poll_fi_ops::<S>() } as *const _ as *mut _,
        },
        ops: const { &poll_ops::<S>() } as *const _ as *mut _,
    };
    // SAFETY: `out` is non-NULL and writable by fi_poll_open's contract.
    unsafe { *out = PollObj::<S>::create(hdr, st, sys::FI_CLASS_POLL).cast() };
    0
}

unsafe extern "C" fn poll_close<S: St>(f: *mut sys::fid) -> c_int {
    // SAFETY: called through the poll set's ops table.
    unsafe { PollObj::<S>::close(f, |s| s.members.len() != 0, |s| s.holds.release()) }
}

/// The name of a member in the core set.
fn name(fid: *mut sys::fid) -> Context {
    Context(fid as usize)
}

/// What a CQ or counter handle of this stack is: its count of dependents, whether it
/// belongs to domain `domain`, and how to add it to a core set.
enum Member<'a, S: St> {
    Cq(&'a objects::CqState<S>),
    Cntr(&'a objects::CntrState<S>),
}

impl<'a, S: St> Member<'a, S> {
    /// The CQ or counter of stack `S` behind `fid`.
    ///
    /// # Safety
    /// `fid` is non-NULL and points to a `struct fid`.
    unsafe fn of(fid: *mut sys::fid) -> Option<Self> {
        // SAFETY: the caller's contract: every fid starts with its class (the lookups
        // then check it is really one of ours, of this stack).
        match unsafe { (*fid).fclass } as u32 {
            sys::FI_CLASS_CQ => objects::cq_of::<S>(fid).map(Member::Cq),
            sys::FI_CLASS_CNTR => objects::cntr_of::<S>(fid).map(Member::Cntr),
            _ => None,
        }
    }

    fn refs(&self) -> &'a Refs {
        match self {
            Member::Cq(c) => &c.refs,
            Member::Cntr(c) => &c.refs,
        }
    }

    fn on_domain(&self, domain: *const Refs) -> bool {
        match self {
            Member::Cq(c) => c.holds.contains(domain),
            Member::Cntr(c) => c.holds.contains(domain),
        }
    }
}

unsafe extern "C" fn poll_add<S: St>(
    ps: *mut sys::fid_poll,
    fid: *mut sys::fid,
    flags: u64,
) -> c_int {
    // SAFETY: called through the poll set's ops table.
    let Some(p) = (unsafe { PollObj::<S>::state(ps) }) else {
        return neg(Error::Inval);
    };
    if fid.is_null() {
        return neg(Error::Inval);
    }
    if flags != 0 {
        return neg(Error::BadFlags);
    }
    // SAFETY: a non-NULL handle from the application.
    let Some(m) = (unsafe { Member::<S>::of(fid) }) else {
        return neg(Error::Inval);
    };
    if !m.on_domain(p.domain) {
        return neg(Error::Inval);
    }
    if !p.members.add_once(m.refs()) {
        return neg(Error::Already);
    }
    match m {
        Member::Cq(c) => p.set.add_cq(&c.cq, name(fid)),
        Member::Cntr(c) => p.set.add_cntr(&c.cntr, name(fid)),
    }
    0
}

unsafe extern "C" fn poll_del<S: St>(
    ps: *mut sys::fid_poll,
    fid: *mut sys::fid,
    flags: u64,
) -> c_int {
    // SAFETY: called through the poll set's ops table.
    let Some(p) = (unsafe { PollObj::<S>::state(ps) }) else {
        return neg(Error::Inval);
    };
    if fid.is_null() {
        return neg(Error::Inval);
    }
    if flags != 0 {
        return neg(Error::BadFlags);
    }
    // SAFETY: a non-NULL handle from the application.
    let Some(m) = (unsafe { Member::<S>::of(fid) }) else {
        return neg(Error::Inval);
    };
    match p.set.del(name(fid)) {
        Ok(()) => {
            p.members.remove(m.refs());
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
