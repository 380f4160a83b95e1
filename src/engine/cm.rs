//! Connection management (`man 3 fi_cm`): passive endpoints, connection requests and
//! their answers, and what a connection event does to an MSG endpoint (its peer
//! installed in the connection table, or everything outstanding failed when the
//! connection goes). The provider carries requests and answers
//! ([`ConnectionManager`]); the EQ events and the endpoint's state are kept here, the
//! same for every provider.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::attr::EpType;
use crate::config::{Config, LockOf};
use crate::error::{Error, Result};
use crate::info::{ConnHandle, Info};
use crate::lock::Lock;
use crate::provider::{CmEvent, CmRequest, ConnectionManager, Provider};
use crate::types::{Context, FiAddr};

use super::endpoint::{CmOf, ConnState, EpInner, TransportOf};
use super::eq::{EqEntry, EqErrEntry, EqEvent, EqInner};

/// Progress rounds that deliver what a peer sent before its shutdown: enough for
/// every frame a socket buffer holds, bounded so a peer cannot keep it going.
const SHUTDOWN_ROUNDS: usize = 1024;

type ListenerOf<S> = <CmOf<S> as ConnectionManager<TransportOf<S>>>::Listener;
type RequestOf<S> = <CmOf<S> as ConnectionManager<TransportOf<S>>>::Request;

/// The largest connection data of stack `S` (`FI_OPT_CM_DATA_SIZE`).
pub(crate) fn cm_data_size<S: Config>() -> usize {
    <CmOf<S> as ConnectionManager<TransportOf<S>>>::CM_DATA_SIZE
}

/// `Err(Inval)` for connection data longer than the provider carries.
fn check_data<S: Config>(data: &[u8]) -> Result<()> {
    if data.len() > cm_data_size::<S>() {
        return Err(Error::Inval);
    }
    Ok(())
}

/// What an [`Info::handle`] holds: the provider's request and whether it was answered
/// (a request is accepted or rejected once).
struct ConnReq<R> {
    req: R,
    answered: AtomicBool,
}

/// The provider's request behind `h`, claimed for an answer: `Err(Inval)` for a handle
/// of another stack or a request already answered.
fn claim<R: Send + Sync + 'static>(h: &ConnHandle) -> Result<&ConnReq<R>> {
    let r = h.0.downcast_ref::<ConnReq<R>>().ok_or(Error::Inval)?;
    if r.answered.swap(true, Ordering::AcqRel) {
        return Err(Error::Inval);
    }
    Ok(r)
}

/// A passive endpoint's state (`fi_passive_ep`).
pub(crate) struct PepInner<S: Config> {
    listener: ListenerOf<S>,
    info: Info,
    eq: LockOf<S, Option<Arc<EqInner<S>>>>,
    listening: LockOf<S, bool>,
    /// What this endpoint's `FI_CONNREQ` events report as their `fid`.
    fid_context: AtomicUsize,
}

impl<S: Config> PepInner<S> {
    /// A passive endpoint for `info` (an MSG info): `NotSupported` on a provider
    /// without connection management.
    pub(crate) fn open(info: &Info) -> Result<Arc<Self>> {
        if !<CmOf<S> as ConnectionManager<TransportOf<S>>>::ENABLED {
            return Err(Error::NotSupported);
        }
        if !matches!(info.ep_attr.ep_type, EpType::Msg | EpType::Unspec) {
            return Err(Error::Inval);
        }
        Ok(Arc::new(PepInner {
            listener: CmOf::<S>::listener(info)?,
            info: info.clone(),
            eq: LockOf::<S, _>::new(None),
            listening: LockOf::<S, _>::new(false),
            fid_context: AtomicUsize::new(0),
        }))
    }

    /// `fi_pep_bind` of an EQ: its reads report this endpoint's connection requests.
    pub(crate) fn bind_eq(self: &Arc<Self>, eq: &Arc<EqInner<S>>) -> Result<()> {
        self.eq.with(|e| {
            if e.is_some() {
                return Err(Error::Inval);
            }
            *e = Some(eq.clone());
            Ok(())
        })?;
        eq.add_cm(super::CmSource::Pep(Arc::downgrade(self)));
        Ok(())
    }

    /// Sets what this endpoint's events report as their `fid`.
    pub(crate) fn set_fid_context(&self, c: Context) {
        self.fid_context.store(c.0, Ordering::Relaxed);
    }

    /// `fi_listen`: `Err(NoEq)` without an EQ, `Err(Inval)` when already listening.
    pub(crate) fn listen(&self) -> Result<()> {
        if self.eq.with(|e| e.is_none()) {
            return Err(Error::NoEq);
        }
        self.listening.with(|l| {
            if *l {
                return Err(Error::Inval);
            }
            CmOf::<S>::listen(&self.listener)?;
            *l = true;
            Ok(())
        })
    }

    /// `fi_getname`.
    pub(crate) fn name(&self) -> Vec<u8> {
        CmOf::<S>::listener_name(&self.listener)
    }

    /// `fi_setname`: before `listen` only (`Err(OpBadState)` after).
    pub(crate) fn set_name(&self, name: &[u8]) -> Result<()> {
        if self.listening.with(|l| *l) {
            return Err(Error::OpBadState);
        }
        CmOf::<S>::set_listener_name(&self.listener, name)
    }

    /// `fi_reject` of the request behind `h`, with `data` for the connecting side.
    pub(crate) fn reject(&self, h: &ConnHandle, data: &[u8]) -> Result<()> {
        check_data::<S>(data)?;
        let r = claim::<RequestOf<S>>(h)?;
        CmOf::<S>::reject(&self.listener, &r.req, data)
    }

    /// The info a request's `FI_CONNREQ` carries: this endpoint's, for an MSG
    /// endpoint towards the requester, naming the request.
    fn request_info(&self, req: RequestOf<S>, peer: Vec<u8>) -> Info {
        let mut info = self.info.clone();
        info.ep_attr.ep_type = EpType::Msg;
        info.src_addr = None;
        info.dest_addr = Some(peer);
        info.handle = Some(ConnHandle(Arc::new(ConnReq {
            req,
            answered: AtomicBool::new(false),
        })));
        info
    }

    /// Posts an `FI_CONNREQ` for every request that arrived.
    pub(crate) fn poll_cm(&self) {
        let Some(eq) = self.eq.with(|e| e.clone()) else {
            return;
        };
        CmOf::<S>::requests(&self.listener, &mut |r| {
            let CmRequest { handle, peer, data } = r;
            let info = self.request_info(handle, peer);
            let h = info.handle.clone();
            let e = EqEntry {
                event: EqEvent::ConnReq,
                fid_context: Context(self.fid_context.load(Ordering::Relaxed)),
                context: Context::NULL,
                data: 0,
                info: Some(data),
                conn: Some(Box::new(info)),
            };
            // A full EQ cannot take the request: refuse it rather than leave the
            // connecting side waiting for an answer nobody will give.
            if eq.post(e).is_err() {
                if let Some(h) = h {
                    let _ = self.reject(&h, &[]);
                }
            }
        });
    }
}

impl<S: Config> EpInner<S> {
    /// The connection of an MSG endpoint: `Err(OpNotSupp)` for the other types.
    fn conn(&self) -> Result<&super::endpoint::Conn<S>> {
        self.conn.as_ref().ok_or(Error::OpNotSupp)
    }

    /// Moves the connection from `Idle` to `Connecting` for `f`, which asks the
    /// provider; the state stays `Idle` when `f` fails.
    fn start(&self, f: impl FnOnce() -> Result<()>) -> Result<()> {
        let c = self.conn()?;
        if self.eq.with(|e| e.is_none()) {
            return Err(Error::NoEq);
        }
        c.state.with(|st| match *st {
            ConnState::Idle => {
                f()?;
                *st = ConnState::Connecting;
                Ok(())
            }
            ConnState::Connected => Err(Error::IsConn),
            ConnState::Connecting => Err(Error::Already),
            ConnState::Closed => Err(Error::OpBadState),
        })
    }

    /// `fi_connect` to the passive endpoint at `addr`, with `data`.
    pub(crate) fn connect(&self, addr: &[u8], data: &[u8]) -> Result<()> {
        check_data::<S>(data)?;
        self.start(|| CmOf::<S>::connect(&self.transport, addr, data))
    }

    /// `fi_accept` of the request named by the endpoint's info, with `data`.
    pub(crate) fn accept(&self, data: &[u8]) -> Result<()> {
        check_data::<S>(data)?;
        let h = self.info.handle.as_ref().ok_or(Error::Inval)?;
        self.start(|| {
            let r = claim::<RequestOf<S>>(h)?;
            CmOf::<S>::accept(&self.transport, &r.req, data)
        })
    }

    /// `fi_shutdown`: the peer sees `FI_SHUTDOWN`; here everything outstanding fails
    /// with `FI_ECANCELED` and later transfers with `FI_EADDRNOTAVAIL`.
    pub(crate) fn shutdown_conn(&self) -> Result<()> {
        let c = self.conn()?;
        c.state.with(|st| match *st {
            ConnState::Connected | ConnState::Connecting => {
                *st = ConnState::Closed;
                Ok(())
            }
            ConnState::Idle | ConnState::Closed => Err(Error::NotConn),
        })?;
        // Gracefully: what completed before the shutdown reaches the peer.
        self.linger();
        self.release_held(Error::Canceled);
        let res = CmOf::<S>::disconnect(&self.transport);
        self.drop_peer(Error::Canceled);
        res
    }

    /// `fi_getpeer`: the connected peer's address; `Err(NotConn)` before the
    /// connection is up and after it went.
    pub(crate) fn peer(&self) -> Result<Vec<u8>> {
        let c = self.conn()?;
        c.table.state.with(|st| {
            st.table
                .lookup(FiAddr(0))
                .map(<[u8]>::to_vec)
                .map_err(|_| Error::NotConn)
        })
    }

    /// Empties the connection table and fails what is outstanding with `err`.
    fn drop_peer(&self, err: Error) {
        if let Some(c) = &self.conn {
            c.table.state.with(|st| {
                let _ = st.table.remove(FiAddr(0));
            });
        }
        self.flush(err, false);
    }

    /// Turns the provider's connection events into EQ events and connection state.
    pub(crate) fn poll_cm(&self) {
        let Some(c) = &self.conn else {
            return;
        };
        let Some(eq) = self.eq.with(|e| e.clone()) else {
            return;
        };
        let fid = Context(c.fid_context.load(Ordering::Relaxed));
        let mut events = Vec::new();
        CmOf::<S>::events(&self.transport, &mut |e| events.push(e));
        for ev in events {
            match ev {
                CmEvent::Connected { peer, data } => {
                    let up = c.state.with(|st| *st == ConnState::Connecting);
                    let installed = up
                        && <S::Provider as Provider>::resolve(&peer).is_ok_and(|p| {
                            c.table.state.with(|st| {
                                st.table
                                    .try_insert_aliased(
                                        &peer,
                                        <S::Provider as Provider>::aliases(&peer),
                                        p,
                                    )
                                    .is_ok()
                            })
                        });
                    if installed {
                        c.state.with(|st| *st = ConnState::Connected);
                        let _ = eq.post(cm_entry(fid, EqEvent::Connected, Some(data)));
                    } else if up {
                        c.state.with(|st| *st = ConnState::Closed);
                        let _ = CmOf::<S>::disconnect(&self.transport);
                        eq.post_err(cm_err(fid, Error::ConnReset, Vec::new()));
                    }
                }
                CmEvent::Refused { data } => {
                    c.state.with(|st| *st = ConnState::Closed);
                    eq.post_err(cm_err(fid, Error::ConnRefused, data));
                }
                CmEvent::Shutdown => {
                    let was = c.state.with(|st| std::mem::replace(st, ConnState::Closed));
                    if was == ConnState::Connected {
                        // What the peer sent before it went is delivered first: a
                        // transport may learn of the end before it read everything
                        // that came ahead of it, so progress runs until it is read.
                        for _ in 0..SHUTDOWN_ROUNDS {
                            if self.progress(None) == 0 {
                                break;
                            }
                        }
                        self.drop_peer(Error::ConnReset);
                        let _ = eq.post(cm_entry(fid, EqEvent::Shutdown, None));
                    }
                }
                CmEvent::Failed(err) => {
                    let was = c.state.with(|st| std::mem::replace(st, ConnState::Closed));
                    if was != ConnState::Closed {
                        self.drop_peer(err);
                        eq.post_err(cm_err(fid, err, Vec::new()));
                    }
                }
            }
        }
    }
}

/// A connection event of the endpoint `fid` names.
fn cm_entry(fid: Context, event: EqEvent, data: Option<Vec<u8>>) -> EqEntry {
    EqEntry {
        event,
        fid_context: fid,
        context: Context::NULL,
        data: 0,
        info: data,
        conn: None,
    }
}

/// A connection error of an endpoint, with the peer's data (a reject's).
fn cm_err(fid: Context, err: Error, data: Vec<u8>) -> EqErrEntry {
    EqErrEntry {
        fid_context: fid,
        context: Context::NULL,
        data: 0,
        err,
        prov_errno: err.code(),
        err_data: data,
    }
}
