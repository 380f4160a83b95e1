//! Wait sets (`fi_wait`), poll sets (`fi_poll`) and `fi_trywait`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attr::{WaitAttr, WaitObj};
use crate::cntr::Counter;
use crate::config::{Config, LockOf, Progress};
use crate::cq::Cq;
use crate::engine::DomainInner;
use crate::eq::EventQueue;
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::types::Context;
use crate::waitobj::Waiter;

/// An object with a wait object: what `fi_trywait` accepts.
pub trait Waitable {
    /// `Ok(())` when it is safe to block on the wait object, `Err(Again)` when events
    /// are ready (process them first).
    fn trywait(&self) -> Result<()>;
    /// Whether events are ready, after one progress pass.
    fn ready(&self) -> bool {
        self.trywait().is_err()
    }
}

impl<S: Config> Waitable for Cq<S> {
    fn trywait(&self) -> Result<()> {
        Cq::trywait(self)
    }
}

impl<S: Config> Waitable for Counter<S> {
    fn trywait(&self) -> Result<()> {
        // A counter "has events" when its value moved since the last trywait; counters
        // carry no consumable entries, so trywait reports readiness of new completions
        // through the wait object and is otherwise always allowed to block.
        let _ = self.read();
        Ok(())
    }
}

impl<S: Config> Waitable for EventQueue<S> {
    fn trywait(&self) -> Result<()> {
        match self.read(true) {
            Err(Error::Again) => Ok(()),
            _ => Err(Error::Again),
        }
    }
}

/// `fi_trywait` over several objects.
pub fn trywait(objs: &[&dyn Waitable]) -> Result<()> {
    for o in objs {
        o.trywait()?;
    }
    Ok(())
}

/// A CQ, counter or EQ attached to a wait or poll set.
enum Member<S: Config> {
    Cq(Cq<S>),
    /// With the success and error values last seen: a counter has events when either
    /// moved (`fi_poll(3)`), so a failed operation that only bumps the error value
    /// is reported too.
    Cntr(Counter<S>, AtomicU64, AtomicU64),
    /// Ready when an event or an error event waits; a read progresses the EQ's
    /// domain, if it has one, itself.
    Eq(EventQueue<S>),
}

impl<S: Config> Member<S> {
    fn ready(&self) -> bool {
        match self {
            Member::Cq(c) => c.trywait().is_err(),
            Member::Cntr(c, last, last_err) => {
                let (v, e) = (c.read(), c.read_err());
                // Both swaps run: each baseline moves to what was just seen.
                (last.swap(v, Ordering::AcqRel) != v) | (last_err.swap(e, Ordering::AcqRel) != e)
            }
            Member::Eq(q) => !matches!(q.read(true), Err(Error::Again)),
        }
    }

    /// The domain to progress before looking (none for an EQ, whose read does it).
    fn domain(&self) -> Option<&Arc<DomainInner<S>>> {
        match self {
            Member::Cq(c) => Some(&c.domain),
            Member::Cntr(c, ..) => Some(&c.domain),
            Member::Eq(_) => None,
        }
    }
}

/// A wait set: one wait object shared by several CQs, counters and EQs.
pub struct WaitSet<S: Config> {
    waiter: Arc<Waiter>,
    members: LockOf<S, Vec<Member<S>>>,
}

impl<S: Config> WaitSet<S> {
    pub(crate) fn open(attr: &WaitAttr) -> Result<Self> {
        let kind = match attr.wait_obj {
            WaitObj::None | WaitObj::Set => return Err(Error::Inval),
            k => k,
        };
        Ok(WaitSet {
            waiter: Arc::new(Waiter::new(kind)?),
            members: LockOf::<S, _>::new(Vec::new()),
        })
    }

    /// A set on an existing wait object, which other sets (of other stacks) may share:
    /// how a binding that opens a wait set before it knows the stacks of the CQs and
    /// counters to come (libfabric's `fi_wait_open` on the fabric) keeps one wait object
    /// for all of them, with one set per stack. `Err(Inval)` for an `FI_WAIT_NONE`
    /// waiter, which nothing could wait on.
    pub fn sharing(waiter: Arc<Waiter>) -> Result<Self> {
        if waiter.kind() == WaitObj::None {
            return Err(Error::Inval);
        }
        Ok(WaitSet {
            waiter,
            members: LockOf::<S, _>::new(Vec::new()),
        })
    }

    /// Detaches `cq` (attached by [`Domain::cq_in_set`](crate::Domain::cq_in_set)), so
    /// that a CQ closed by its user stops counting as an event source of the set. The
    /// CQ keeps signaling the set's wait object while other handles to it live.
    pub fn detach_cq(&self, cq: &Cq<S>) {
        self.members.with(|m| {
            m.retain(|mem| !matches!(mem, Member::Cq(c) if Arc::ptr_eq(&c.inner, &cq.inner)))
        });
    }

    /// Detaches `cntr` (attached by
    /// [`Domain::cntr_in_set`](crate::Domain::cntr_in_set)), as [`WaitSet::detach_cq`].
    pub fn detach_cntr(&self, cntr: &Counter<S>) {
        self.members.with(|m| {
            m.retain(
                |mem| !matches!(mem, Member::Cntr(c, ..) if Arc::ptr_eq(&c.inner, &cntr.inner)),
            )
        });
    }

    /// Detaches `eq` (attached by [`Fabric::eq_in_set`](crate::Fabric::eq_in_set)),
    /// as [`WaitSet::detach_cq`].
    pub fn detach_eq(&self, eq: &EventQueue<S>) {
        self.members.with(|m| {
            m.retain(|mem| !matches!(mem, Member::Eq(q) if Arc::ptr_eq(&q.inner, &eq.inner)))
        });
    }

    pub(crate) fn waiter(&self) -> &Arc<Waiter> {
        &self.waiter
    }

    pub(crate) fn attach_cq(&self, cq: &Cq<S>) {
        self.members.with(|m| m.push(Member::Cq(cq.clone())));
    }

    pub(crate) fn attach_cntr(&self, cntr: &Counter<S>) {
        self.members.with(|m| {
            m.push(Member::Cntr(
                cntr.clone(),
                AtomicU64::new(0),
                AtomicU64::new(0),
            ))
        });
    }

    pub(crate) fn attach_eq(&self, eq: &EventQueue<S>) {
        self.members.with(|m| m.push(Member::Eq(eq.clone())));
    }

    /// `fi_wait`: blocks until an attached object has events (`Ok`) or the timeout
    /// (`Err(Again)`).
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let token = self.waiter.prepare();
            let ready = self.members.with(|m| {
                m.iter().any(|mem| {
                    if let (false, Some(d)) = (<S::Progress as Progress>::AUTO, mem.domain()) {
                        d.progress();
                    }
                    mem.ready()
                })
            });
            if ready {
                return Ok(());
            }
            let left = match deadline {
                None => Duration::from_millis(2),
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(Error::Again);
                    }
                    (d - now).min(Duration::from_millis(2))
                }
            };
            let _ = self.waiter.wait(token, Some(left));
        }
    }

    /// The set's file descriptor (`FI_WAIT_FD` sets).
    pub fn fd(&self) -> Option<std::os::fd::RawFd> {
        self.waiter.fd()
    }
}

/// A poll set: reports which of its CQs and counters have events.
pub struct PollSet<S: Config> {
    domain: Arc<DomainInner<S>>,
    members: LockOf<S, Vec<(Context, Member<S>)>>,
}

impl<S: Config> PollSet<S> {
    pub(crate) fn new(domain: Arc<DomainInner<S>>) -> Self {
        PollSet {
            domain,
            members: LockOf::<S, _>::new(Vec::new()),
        }
    }

    /// `fi_poll_add` of a CQ, reported by `context` when it has completions.
    pub fn add_cq(&self, cq: &Cq<S>, context: Context) {
        self.members
            .with(|m| m.push((context, Member::Cq(cq.clone()))));
    }

    /// `fi_poll_add` of a counter, reported when its value or error value changed since
    /// the last poll.
    pub fn add_cntr(&self, cntr: &Counter<S>, context: Context) {
        let (last, last_err) = (AtomicU64::new(cntr.read()), AtomicU64::new(cntr.read_err()));
        self.members
            .with(|m| m.push((context, Member::Cntr(cntr.clone(), last, last_err))));
    }

    /// `fi_poll_del`: removes the member added with `context`.
    pub fn del(&self, context: Context) -> Result<()> {
        self.members.with(|m| {
            let before = m.len();
            m.retain(|(c, _)| *c != context);
            if m.len() == before {
                Err(Error::NoEnt)
            } else {
                Ok(())
            }
        })
    }

    /// `fi_poll`: progresses, then writes the contexts of members with events into
    /// `out`; returns how many.
    pub fn poll(&self, out: &mut [Context]) -> Result<usize> {
        if !<S::Progress as Progress>::AUTO {
            self.domain.progress();
        }
        Ok(self.members.with(|m| {
            let mut n = 0;
            for (c, f) in m.iter() {
                if n == out.len() {
                    break;
                }
                if f.ready() {
                    out[n] = *c;
                    n += 1;
                }
            }
            n
        }))
    }
}
