//! Memory regions (`fi_mr`): registration with access rights, offset, requested or
//! provider-assigned keys; descriptors; binding to counters and endpoints.
//!
//! A registration borrows the memory mutably for its lifetime `'a`, so the region cannot
//! be freed or touched behind the provider's back while peers may access it. While it is
//! registered, local access goes through [`MemoryRegion::read`] / [`MemoryRegion::write`],
//! which serialize with remote accesses through the domain's MR table.
#![allow(unsafe_code)] // only the raw copies of `read` and `write`

use core::marker::PhantomData;
use std::sync::Arc;

use crate::attr::MrAttr;
use crate::bytes::copy_bytes;
use crate::cntr::Counter;
use crate::config::Config;
use crate::endpoint::Endpoint;
use crate::engine::mr::{MrUser, Segment};
use crate::engine::shared::Shared;
use crate::error::{Error, Result};
use crate::flags::{BindFlags, MrAccess, MrMode};
use crate::lock::Lock;
use crate::types::MrKey;

/// A local descriptor (`fi_mr_desc`), passed with buffers in `FI_MR_LOCAL` domains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MrDesc(pub MrKey);

/// A registered memory region borrowing its memory for `'a`.
pub struct MemoryRegion<'a, S: Config> {
    domain: Arc<Shared<S>>,
    key: MrKey,
    base: usize,
    len: usize,
    _mem: PhantomData<&'a mut [u8]>,
}

impl<'a, S: Config> MemoryRegion<'a, S> {
    pub(crate) fn register(
        domain: &Arc<Shared<S>>,
        bufs: Vec<&'a mut [u8]>,
        attr: &MrAttr,
    ) -> Result<Self> {
        if bufs.len() > domain.info.domain_attr.mr_iov_limit.max(1) {
            return Err(Error::Inval);
        }
        let segs: Vec<Segment> = bufs
            .iter()
            .map(|b| Segment {
                addr: b.as_ptr() as usize,
                len: b.len(),
            })
            .collect();
        let base = segs.first().map_or(0, |s| s.addr);
        let len = segs.iter().map(|s| s.len).sum();
        let user = MrUser {
            ep: None,
            cntr: None,
            cntr_flags: BindFlags::empty(),
        };
        let key = domain
            .mr
            .with(|t| t.register(&segs, attr.access, attr.offset, attr.requested_key, user))?;
        Ok(MemoryRegion {
            domain: domain.clone(),
            key,
            base,
            len,
            _mem: PhantomData,
        })
    }

    /// `fi_mr_key`: the key peers use.
    #[inline]
    pub fn key(&self) -> MrKey {
        self.key
    }

    /// `fi_mr_desc`: the local descriptor.
    #[inline]
    pub fn desc(&self) -> MrDesc {
        MrDesc(self.key)
    }

    /// The remote address of the first byte: the virtual address in `FI_MR_VIRT_ADDR`
    /// domains, else the registration's offset.
    pub fn remote_addr(&self) -> u64 {
        if self
            .domain
            .info
            .domain_attr
            .mr_mode
            .contains(MrMode::VIRT_ADDR)
        {
            self.base as u64
        } else {
            self.domain
                .mr
                .with(|t| t.get(self.key).map_or(0, |e| e.offset()))
        }
    }

    /// Registered length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `fi_mr_bind` to a counter: remote writes (`FI_REMOTE_WRITE`) and/or reads
    /// (`FI_REMOTE_READ`) of this region increment it.
    pub fn bind_cntr(&self, cntr: &Counter<S>, flags: BindFlags) -> Result<()> {
        if !flags.intersects(BindFlags::REMOTE_WRITE | BindFlags::REMOTE_READ) {
            return Err(Error::BadFlags);
        }
        self.domain.mr.with(|t| {
            let e = t.get_mut(self.key).ok_or(Error::Inval)?;
            e.user_mut().cntr = Some(cntr.inner.clone());
            e.user_mut().cntr_flags = flags;
            Ok(())
        })
    }

    /// `fi_mr_bind` to an endpoint (`FI_MR_ENDPOINT` domains): only peers addressing
    /// that endpoint may access the region.
    pub fn bind_ep(&self, ep: &Endpoint<S>) -> Result<()> {
        let id = ep.id();
        self.domain.mr.with(|t| {
            let e = t.get_mut(self.key).ok_or(Error::Inval)?;
            e.user_mut().ep = Some(id);
            Ok(())
        })
    }

    /// `fi_mr_enable`: required in `FI_MR_ENDPOINT` / `FI_MR_RMA_EVENT` domains before use.
    pub fn enable(&self) -> Result<()> {
        self.domain.mr.with(|t| t.enable(self.key))
    }

    /// `fi_mr_refresh`: host memory registered here never goes stale, so this only
    /// checks that the registration is live.
    pub fn refresh(&self) -> Result<()> {
        self.domain
            .mr
            .with(|t| t.get(self.key).map(|_| ()).ok_or(Error::Inval))
    }

    /// Copies bytes out of the region at `offset` (from the start of the region),
    /// serialized with remote accesses.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.pieces(offset, out.len(), |addr, range| {
            let dst = &mut out[range];
            // SAFETY: `pieces` hands out ranges of a live registration whose memory this
            // object borrows for 'a, under the table lock (remote accesses through the
            // engine take it too). Peers in other processes may still write a published
            // segment through their direct path meanwhile, so the memory is read through
            // a raw pointer, never as a reference; `dst` is ours and cannot overlap it.
            unsafe { copy_bytes(addr as *const u8, dst.as_mut_ptr(), dst.len()) };
        })
    }

    /// Copies bytes into the region at `offset`, serialized with remote accesses.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.pieces(offset, data.len(), |addr, range| {
            let src = &data[range];
            // SAFETY: as in `read`: a live registration's range, written through a raw
            // pointer because peers may access a published segment at the same time;
            // `src` is the caller's and cannot overlap registered memory this object
            // borrows mutably.
            unsafe { copy_bytes(src.as_ptr(), addr as *mut u8, src.len()) };
        })
    }

    /// Calls `f(address, range of the caller's buffer)` for each registered segment piece
    /// covering `[offset, offset + len)` of the region, in order, under the table lock.
    fn pieces(
        &self,
        offset: usize,
        len: usize,
        mut f: impl FnMut(usize, core::ops::Range<usize>),
    ) -> Result<()> {
        let end = offset.checked_add(len).ok_or(Error::Fault)?;
        if end > self.len {
            return Err(Error::Fault);
        }
        self.domain.mr.with(|t| {
            let e = t.get(self.key).ok_or(Error::Inval)?;
            let mut pos = 0usize;
            for s in e.segments() {
                let (lo, hi) = (pos, pos + s.len);
                pos = hi;
                if hi <= offset || lo >= end {
                    continue;
                }
                let (a, b) = (offset.max(lo), end.min(hi));
                f(s.addr + (a - lo), (a - offset)..(b - offset));
            }
            Ok(())
        })
    }

    /// Access rights of the region.
    pub fn access(&self) -> MrAccess {
        self.domain
            .mr
            .with(|t| t.get(self.key).map_or(MrAccess::empty(), |e| e.access()))
    }
}

impl<S: Config> Drop for MemoryRegion<'_, S> {
    fn drop(&mut self) {
        // Deregistration under the table lock: after this no remote access can reach the
        // memory, so the borrow may end.
        let _ = self.domain.mr.with(|t| t.deregister(self.key));
    }
}
