//! Address vectors (`fi_av`): insert (sync and async with EQ completion), insertsvc,
//! remove, lookup, straddr, named shared AVs, `rx_ctx_bits`.

use std::sync::Arc;

use crate::attr::{AvAttr, FI_EVENT, FI_READ, FI_SYNC_ERR};
use crate::config::{Config, LockOf};
use crate::engine::av::{AvInner, AvState, AvTable};
use crate::engine::DomainInner;
use crate::eq::{EqEntry, EqErrEntry, EqEvent, EventQueue};
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::provider::Provider;
use crate::types::{Context, FiAddr};

/// An address vector of configuration `S`: addresses are encoded by `S::Av`.
pub struct AddressVector<S: Config> {
    pub(crate) inner: Arc<AvInner<S>>,
    read_only: bool,
}

impl<S: Config> Clone for AddressVector<S> {
    fn clone(&self) -> Self {
        AddressVector {
            inner: self.inner.clone(),
            read_only: self.read_only,
        }
    }
}

impl<S: Config> AddressVector<S> {
    pub(crate) fn open(domain: &Arc<DomainInner<S>>, attr: &AvAttr) -> Result<Self> {
        if attr.rx_ctx_bits > 16 {
            return Err(Error::Inval);
        }
        let read_only = attr.flags & FI_READ != 0;
        if let Some(name) = attr.name {
            let existing = domain.fabric.named_avs.with(|m| {
                m.retain(|(_, w)| w.strong_count() > 0);
                m.iter()
                    .find(|(n, _)| n == name)
                    .and_then(|(_, w)| w.upgrade())
            });
            match existing {
                Some(inner) => {
                    if inner.rx_ctx_bits != attr.rx_ctx_bits {
                        return Err(Error::Inval);
                    }
                    return Ok(AddressVector { inner, read_only });
                }
                None if read_only => return Err(Error::NoEnt),
                None => {}
            }
        }
        let inner = Arc::new(AvInner {
            state: LockOf::<S, _>::new(AvState {
                table: AvTable::with_rx_ctx_bits(attr.count, attr.rx_ctx_bits)?,
                eq: None,
            }),
            rx_ctx_bits: attr.rx_ctx_bits,
            name: attr.name.map(str::to_owned),
            async_events: attr.flags & FI_EVENT != 0,
        });
        if let Some(name) = attr.name {
            domain
                .fabric
                .named_avs
                .with(|m| m.push((name.to_owned(), Arc::downgrade(&inner))));
        }
        Ok(AddressVector { inner, read_only })
    }

    /// `fi_av_bind`: an EQ for asynchronous insert completions (`FI_EVENT` AVs).
    pub fn bind_eq(&self, eq: &EventQueue<S>) -> Result<()> {
        self.inner.state.with(|st| st.eq = Some(eq.inner.clone()));
        Ok(())
    }

    /// Inserts one peer by its raw address (`fi_av_insert` with count 1).
    pub fn insert(&self, name: &[u8]) -> Result<FiAddr> {
        if self.read_only {
            return Err(Error::Perm);
        }
        let peer = S::Provider::resolve(name)?;
        let aliases = S::Provider::aliases(name);
        Ok(self.inner.state.with(|st| {
            st.table
                .try_insert_aliased(name, aliases, peer)
                .unwrap_or(FiAddr::NOTAVAIL)
        }))
    }

    /// `fi_av_insert` of several peers. Synchronously: the addresses, with
    /// `FiAddr::NOTAVAIL` for peers that failed (with `FI_SYNC_ERR` in `flags`, the
    /// first failure is returned as the error instead). For an AV opened with
    /// `FI_EVENT`, completion is reported on the bound EQ as `FI_AV_COMPLETE` with the
    /// number inserted in `data` and an error event per failed index; the addresses are
    /// still returned.
    pub fn insert_many(
        &self,
        names: &[&[u8]],
        flags: u64,
        context: Context,
    ) -> Result<Vec<FiAddr>> {
        if self.read_only {
            return Err(Error::Perm);
        }
        let mut out = Vec::with_capacity(names.len());
        let mut errs = Vec::new();
        for (i, n) in names.iter().enumerate() {
            match self.insert(n) {
                Ok(a) => out.push(a),
                Err(e) => {
                    if flags & FI_SYNC_ERR != 0 && !self.inner.async_events {
                        return Err(e);
                    }
                    errs.push((i, e));
                    out.push(FiAddr::NOTAVAIL);
                }
            }
        }
        if self.inner.async_events {
            let eq = self
                .inner
                .state
                .with(|st| st.eq.clone())
                .ok_or(Error::NoEq)?;
            for (i, e) in &errs {
                eq.post_err(EqErrEntry {
                    fid_context: Context::NULL,
                    context,
                    data: *i as u64,
                    err: *e,
                    prov_errno: e.code(),
                    err_data: Vec::new(),
                });
            }
            eq.post(EqEntry {
                event: EqEvent::AvComplete,
                fid_context: Context::NULL,
                context,
                data: (names.len() - errs.len()) as u64,
                info: None,
                conn: None,
            })?;
        }
        Ok(out)
    }

    /// `fi_av_insertsvc`: inserts the peer named by a node and service string.
    pub fn insert_svc(&self, node: &str, service: &str) -> Result<FiAddr> {
        let name = S::Provider::name_from_svc(node, service)?;
        self.insert(&name)
    }

    /// `fi_av_remove`.
    pub fn remove(&self, addrs: &[FiAddr]) -> Result<()> {
        if self.read_only {
            return Err(Error::Perm);
        }
        self.inner.state.with(|st| {
            for a in addrs {
                st.table.remove(*a)?;
            }
            Ok(())
        })
    }

    /// `fi_av_lookup`: the raw address of a peer.
    pub fn lookup(&self, addr: FiAddr) -> Result<Vec<u8>> {
        let (base, _) = addr.split_rx(self.inner.rx_ctx_bits);
        self.inner
            .state
            .with(|st| st.table.lookup(base).map(<[u8]>::to_vec))
    }

    /// `fi_av_straddr`: a printable form of a raw address.
    pub fn straddr(&self, name: &[u8]) -> String {
        S::Provider::straddr(name)
    }

    /// `fi_rx_addr` for this AV's `rx_ctx_bits`.
    pub fn rx_addr(&self, addr: FiAddr, rx_index: u32) -> FiAddr {
        addr.rx_addr(rx_index, self.inner.rx_ctx_bits)
    }

    /// Number of valid addresses.
    pub fn len(&self) -> usize {
        self.inner.state.with(|st| st.table.len())
    }

    /// Whether the AV holds no address.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name of a shared AV.
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }
}
