//! Connection management (`fi_cm`): passive endpoints that listen for connection
//! requests, and the connect, accept, shutdown and getpeer calls of MSG endpoints.
//!
//! The flow is libfabric's: the listening side opens a [`PassiveEndpoint`] from an MSG
//! info ([`Fabric::passive_ep`](crate::Fabric::passive_ep)), binds an EQ and listens;
//! the connecting side opens an MSG endpoint, binds an EQ and calls
//! [`Endpoint::connect`] with the passive endpoint's name. The listener's EQ reports
//! `FI_CONNREQ` with an [`Info`] whose [`handle`](Info::handle) names the request: an
//! endpoint opened from that info answers it with [`Endpoint::accept`], or
//! [`PassiveEndpoint::reject`] refuses it. Both sides then see `FI_CONNECTED` (the
//! connecting side with the accept's connection data), or the connecting side an
//! `FI_ECONNREFUSED` error event carrying the reject's data in
//! [`err_data`](crate::EqErrEntry::err_data). Data transfer on a connected endpoint goes
//! to its peer whatever destination address is passed (`FiAddr::UNSPEC` by
//! convention), without an AV. When either side shuts down or goes away, the other
//! sees `FI_SHUTDOWN`, its outstanding operations complete in error and later
//! transfers fail.

use std::sync::Arc;

use crate::config::Config;
use crate::engine::cm::PepInner;
use crate::engine::CmSource;
use crate::eq::EventQueue;
use crate::error::{Error, Result};
use crate::info::{ConnHandle, Info};
use crate::lock::Lock;
use crate::types::Context;

use super::Endpoint;

/// A passive endpoint (`fi_passive_ep`): listens for connection requests, reported on
/// its EQ as `FI_CONNREQ` events.
pub struct PassiveEndpoint<S: Config> {
    inner: Arc<PepInner<S>>,
}

impl<S: Config> PassiveEndpoint<S> {
    pub(crate) fn open(info: &Info) -> Result<Self> {
        Ok(PassiveEndpoint {
            inner: PepInner::open(info)?,
        })
    }

    /// `fi_pep_bind` of an event queue (once; `Err(Inval)` for a second one).
    pub fn bind_eq(&self, eq: &EventQueue<S>) -> Result<()> {
        self.inner.bind_eq(&eq.inner)
    }

    /// What this endpoint's `FI_CONNREQ` events report as their object
    /// ([`EqEntry::fid_context`](crate::EqEntry::fid_context); `Context::NULL` until
    /// set): a C binding passes the address of the endpoint's `fid`.
    pub fn set_fid_context(&self, c: Context) {
        self.inner.set_fid_context(c);
    }

    /// `fi_listen`: from now on connects to [`name`](Self::name) arrive as
    /// `FI_CONNREQ` events. `Err(NoEq)` without an EQ.
    pub fn listen(&self) -> Result<()> {
        self.inner.listen()
    }

    /// `fi_getname`: the address connecting endpoints pass to
    /// [`Endpoint::connect`].
    pub fn name(&self) -> Vec<u8> {
        self.inner.name()
    }

    /// `fi_setname`: listen at `name` instead (before [`listen`](Self::listen)).
    pub fn set_name(&self, name: &[u8]) -> Result<()> {
        self.inner.set_name(name)
    }

    /// `fi_reject`: refuses the request `handle` (from an `FI_CONNREQ` info) with
    /// connection data `data` (at most `FI_OPT_CM_DATA_SIZE` bytes, else
    /// `Err(Inval)`). `Err(Inval)` for a request already accepted or rejected.
    pub fn reject(&self, handle: &ConnHandle, data: &[u8]) -> Result<()> {
        self.inner.reject(handle, data)
    }
}

impl<S: Config> Endpoint<S> {
    /// `fi_ep_bind` of an event queue for an MSG endpoint: its reads report this
    /// endpoint's connection events.
    pub(crate) fn bind_cm_eq(&self, eq: &EventQueue<S>) -> Result<()> {
        let first = self.ep().eq.with(|e| {
            let first = e.is_none();
            *e = Some(eq.inner.clone());
            first
        });
        if !first {
            return Err(Error::Inval);
        }
        eq.inner.add_cm(CmSource::Ep(Arc::downgrade(&self.h.inner)));
        Ok(())
    }

    /// `fi_connect` of an MSG endpoint to the passive endpoint named `addr`, with
    /// connection data `data` (at most `FI_OPT_CM_DATA_SIZE` bytes, else
    /// `Err(Inval)`). The outcome is an event on the endpoint's EQ: `FI_CONNECTED`
    /// with the accept's data, or an `FI_ECONNREFUSED` error event. `Err(NoEq)`
    /// without an EQ, `Err(OpNotSupp)` on an RDM or DGRAM endpoint, `Err(IsConn)` /
    /// `Err(Already)` / `Err(OpBadState)` once connected, connecting or closed.
    pub fn connect(&self, addr: &[u8], data: &[u8]) -> Result<()> {
        self.ep().connect(addr, data)
    }

    /// `fi_accept` of the connection request named by the endpoint's info
    /// ([`Info::handle`], from an `FI_CONNREQ` event), with connection data `data` for
    /// the connecting side. Both sides then see `FI_CONNECTED`. `Err(Inval)` when the
    /// info names no request or the request was already accepted or rejected.
    pub fn accept(&self, data: &[u8]) -> Result<()> {
        self.ep().accept(data)
    }

    /// `fi_shutdown` of a connection: the peer sees `FI_SHUTDOWN`; operations still
    /// outstanding here complete with `FI_ECANCELED` and later transfers fail.
    /// `Err(NotConn)` when not connected.
    pub fn shutdown(&self) -> Result<()> {
        self.ep().shutdown_conn()
    }

    /// What this MSG endpoint's connection events (and their errors) report as their
    /// object ([`EqEntry::fid_context`](crate::EqEntry::fid_context); `Context::NULL`
    /// until set): a C binding passes the address of the endpoint's `fid`.
    /// `Err(OpNotSupp)` on an RDM or DGRAM endpoint, which has no connection events.
    pub fn set_fid_context(&self, c: Context) -> Result<()> {
        let conn = self.ep().conn.as_ref().ok_or(Error::OpNotSupp)?;
        conn.fid_context
            .store(c.0, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// `fi_getpeer`: the raw address of the connected peer; `Err(NotConn)` before the
    /// connection is up (its `FI_CONNECTED` read from the EQ) and after it went.
    pub fn peer(&self) -> Result<Vec<u8>> {
        self.ep().peer()
    }
}
