//! Atomics (`man 3 fi_atomic`): base, fetching and compare atomics, their vector and
//! message forms, and the valid queries.
#![allow(unsafe_code)] // only the `unsafe` posting calls, whose contracts the callers keep

use crate::atomic::{self, AtomicClass, AtomicOp, Datatype};
use crate::config::Config;
use crate::engine::endpoint::{RmaIov, TxReq};
use crate::error::{Error, Result};
use crate::flags::OpFlags;
use crate::mem::RawIov;
use crate::provider::wire::{Op, HDR_COMPARE, HDR_FETCH};
use crate::types::{Context, FiAddr, MrKey};

use super::request::data_of;
use super::{Endpoint, TxContext};

/// `struct fi_msg_atomic` (one target segment).
#[derive(Debug, Clone, Copy)]
pub struct AtomicMsg<'a> {
    /// Operand values (`count * size` bytes; empty for `FI_ATOMIC_READ`).
    pub operand: &'a [u8],
    /// Target.
    pub addr: FiAddr,
    /// Remote address of the first element.
    pub remote_addr: u64,
    /// Remote key.
    pub key: MrKey,
    /// Datatype.
    pub datatype: Datatype,
    /// Operation.
    pub op: AtomicOp,
    /// Operation context.
    pub context: Context,
    /// Remote CQ data (with `FI_REMOTE_CQ_DATA`).
    pub data: u64,
}

/// The checks of `fi_atomic(3)` every atomic passes before anything else: the
/// combination is valid for `class` (else `FI_EOPNOTSUPP`), and the `n` bytes it
/// touches at the target (`operand` bytes, or `result` bytes for `FI_ATOMIC_READ`) are
/// a whole, non-zero number of elements within the limit, matched by `compare` and
/// `result` where the class has them (else `FI_EINVAL`). Returns `n`.
#[inline(always)]
pub(super) fn atomic_len(
    class: AtomicClass,
    op: AtomicOp,
    dt: Datatype,
    operand: usize,
    compare: usize,
    result: usize,
) -> Result<usize> {
    if !atomic::is_valid(class, op, dt) {
        return Err(Error::OpNotSupp);
    }
    let size = dt.size();
    let n = if op == AtomicOp::AtomicRead {
        result
    } else {
        operand
    };
    if n == 0 || !n.is_multiple_of(size) || n > crate::limits::MAX_ATOMIC_SIZE {
        return Err(Error::Inval);
    }
    if (class == AtomicClass::Compare && compare != n)
        || (class != AtomicClass::Base && result != n)
    {
        return Err(Error::Inval);
    }
    Ok(n)
}

pub(super) fn atomic_req<'a>(
    class: AtomicClass,
    iov: &'a [&'a [u8]],
    compare: &'a [u8],
    result: RawIov,
    m: &AtomicMsg<'_>,
) -> Result<TxReq<'a>> {
    let n = atomic_len(
        class,
        m.op,
        m.datatype,
        iov.iter().map(|s| s.len()).sum(),
        compare.len(),
        result.len(),
    )?;
    let bits = match class {
        AtomicClass::Base => 0,
        AtomicClass::Fetch => HDR_FETCH,
        AtomicClass::Compare => HDR_COMPARE,
    };
    Ok(TxReq {
        op: Op::Atomic,
        iov,
        compare,
        result,
        dest: m.addr,
        tag: 0,
        data: None,
        rma: RmaIov {
            addr: m.remote_addr,
            len: n,
            key: m.key,
        },
        atomic: (m.op.as_raw(), m.datatype.as_raw(), bits),
        ctx: m.context,
    })
}

macro_rules! atomic_tx {
    ($ty:ident) => {
        impl<S: Config> $ty<S> {
            /// The lean atomic entry ([`EpInner::post_amo`]) for message form `m` of
            /// kind `BITS`, whose operand was checked to cover `n` target bytes.
            #[inline(always)]
            fn amo_msg<const BITS: u8>(
                &self,
                m: &AtomicMsg<'_>,
                compare: &[u8],
                result: RawIov,
                n: usize,
                flags: OpFlags,
            ) -> Result<()> {
                let rma = RmaIov {
                    addr: m.remote_addr,
                    len: n,
                    key: m.key,
                };
                self.ep().post_amo::<BITS>(
                    self.txi(),
                    m.operand,
                    compare,
                    result,
                    m.datatype,
                    m.op,
                    m.addr,
                    rma,
                    data_of(flags, m.data),
                    m.context,
                    flags,
                )
            }
            /// `fi_atomic`: `operand` holds `count` values of `datatype`.
            #[allow(clippy::too_many_arguments)]
            #[inline]
            pub fn atomic(
                &self,
                operand: &[u8],
                datatype: Datatype,
                op: AtomicOp,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let m = AtomicMsg {
                    operand,
                    addr: dest,
                    remote_addr: addr,
                    key,
                    datatype,
                    op,
                    context,
                    data: 0,
                };
                self.atomicmsg(&m, self.tx_flags)
            }
            /// `fi_inject_atomic`.
            #[inline]
            pub fn inject_atomic(
                &self,
                operand: &[u8],
                datatype: Datatype,
                op: AtomicOp,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
            ) -> Result<()> {
                let m = AtomicMsg {
                    operand,
                    addr: dest,
                    remote_addr: addr,
                    key,
                    datatype,
                    op,
                    context: Context::NULL,
                    data: 0,
                };
                self.atomicmsg(&m, self.tx_flags | OpFlags::INJECT_CALL)
            }
            /// `fi_atomicmsg`.
            #[inline]
            pub fn atomicmsg(&self, m: &AtomicMsg<'_>, flags: OpFlags) -> Result<()> {
                // Checked here as `atomic_req` checks it; the entry builds the request
                // only when it takes the generic path.
                let n = atomic_len(AtomicClass::Base, m.op, m.datatype, m.operand.len(), 0, 0)?;
                self.amo_msg::<0>(m, &[], RawIov::EMPTY, n, flags)
            }
            /// `fi_fetch_atomic`: `result` receives the target's previous values.
            ///
            /// # Safety
            /// `result` must stay valid and untouched until the operation completes or
            /// the endpoint is dropped.
            #[allow(clippy::too_many_arguments)]
            #[inline]
            pub unsafe fn fetch_atomic(
                &self,
                operand: &[u8],
                result: &mut [u8],
                datatype: Datatype,
                op: AtomicOp,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let m = AtomicMsg {
                    operand,
                    addr: dest,
                    remote_addr: addr,
                    key,
                    datatype,
                    op,
                    context,
                    data: 0,
                };
                // SAFETY: forwarded contract.
                unsafe { self.fetch_atomicmsg(&m, result, self.tx_flags) }
            }
            /// `fi_fetch_atomicmsg`.
            ///
            /// # Safety
            /// As [`Self::fetch_atomic`].
            #[inline]
            pub unsafe fn fetch_atomicmsg(
                &self,
                m: &AtomicMsg<'_>,
                result: &mut [u8],
                flags: OpFlags,
            ) -> Result<()> {
                // Checked here as `atomic_req` checks it; the entry builds the request
                // only when it takes the generic path.
                let n = atomic_len(
                    AtomicClass::Fetch,
                    m.op,
                    m.datatype,
                    m.operand.len(),
                    0,
                    result.len(),
                )?;
                self.amo_msg::<HDR_FETCH>(m, &[], RawIov::one(result), n, flags)
            }
            /// `fi_compare_atomic`: swaps per `op` when `compare` matches; `result`
            /// receives the previous values.
            ///
            /// # Safety
            /// As [`Self::fetch_atomic`].
            #[allow(clippy::too_many_arguments)]
            #[inline]
            pub unsafe fn compare_atomic(
                &self,
                operand: &[u8],
                compare: &[u8],
                result: &mut [u8],
                datatype: Datatype,
                op: AtomicOp,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let m = AtomicMsg {
                    operand,
                    addr: dest,
                    remote_addr: addr,
                    key,
                    datatype,
                    op,
                    context,
                    data: 0,
                };
                // SAFETY: forwarded contract.
                unsafe { self.compare_atomicmsg(&m, compare, result, self.tx_flags) }
            }
            /// `fi_compare_atomicmsg`.
            ///
            /// # Safety
            /// As [`Self::fetch_atomic`].
            #[inline]
            pub unsafe fn compare_atomicmsg(
                &self,
                m: &AtomicMsg<'_>,
                compare: &[u8],
                result: &mut [u8],
                flags: OpFlags,
            ) -> Result<()> {
                // Checked here as `atomic_req` checks it (as `fetch_atomicmsg`).
                let n = atomic_len(
                    AtomicClass::Compare,
                    m.op,
                    m.datatype,
                    m.operand.len(),
                    compare.len(),
                    result.len(),
                )?;
                self.amo_msg::<HDR_COMPARE>(m, compare, RawIov::one(result), n, flags)
            }
            /// `fi_atomicv`: the operand gathered from several buffers (`fi_ioc` list).
            #[allow(clippy::too_many_arguments)]
            #[inline]
            pub fn atomicv(
                &self,
                operand: &[&[u8]],
                datatype: Datatype,
                op: AtomicOp,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let m = AtomicMsg {
                    operand: &[],
                    addr: dest,
                    remote_addr: addr,
                    key,
                    datatype,
                    op,
                    context,
                    data: 0,
                };
                let r = atomic_req(AtomicClass::Base, operand, &[], RawIov::EMPTY, &m)?;
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_fetch_atomicv`: operand gathered, old values scattered into `result`.
            ///
            /// # Safety
            /// As [`Self::fetch_atomic`], for every result buffer.
            #[allow(clippy::too_many_arguments)]
            #[inline]
            pub unsafe fn fetch_atomicv(
                &self,
                operand: &[&[u8]],
                result: &mut [&mut [u8]],
                datatype: Datatype,
                op: AtomicOp,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let m = AtomicMsg {
                    operand: &[],
                    addr: dest,
                    remote_addr: addr,
                    key,
                    datatype,
                    op,
                    context,
                    data: 0,
                };
                let operand = if op == AtomicOp::AtomicRead {
                    &[][..]
                } else {
                    operand
                };
                let r = atomic_req(AtomicClass::Fetch, operand, &[], RawIov::many(result)?, &m)?;
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_compare_atomicv`: the compare values are one contiguous buffer.
            ///
            /// # Safety
            /// As [`Self::fetch_atomic`], for every result buffer.
            #[allow(clippy::too_many_arguments)]
            #[inline]
            pub unsafe fn compare_atomicv(
                &self,
                operand: &[&[u8]],
                compare: &[u8],
                result: &mut [&mut [u8]],
                datatype: Datatype,
                op: AtomicOp,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let m = AtomicMsg {
                    operand: &[],
                    addr: dest,
                    remote_addr: addr,
                    key,
                    datatype,
                    op,
                    context,
                    data: 0,
                };
                let r = atomic_req(
                    AtomicClass::Compare,
                    operand,
                    compare,
                    RawIov::many(result)?,
                    &m,
                )?;
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_atomicvalid`: the most elements one base atomic may carry.
            pub fn atomicvalid(&self, datatype: Datatype, op: AtomicOp) -> Result<usize> {
                atomic::valid_count(
                    AtomicClass::Base,
                    op,
                    datatype,
                    crate::limits::MAX_ATOMIC_SIZE,
                )
            }
            /// `fi_fetch_atomicvalid`.
            pub fn fetch_atomicvalid(&self, datatype: Datatype, op: AtomicOp) -> Result<usize> {
                atomic::valid_count(
                    AtomicClass::Fetch,
                    op,
                    datatype,
                    crate::limits::MAX_ATOMIC_SIZE,
                )
            }
            /// `fi_compare_atomicvalid`.
            pub fn compare_atomicvalid(&self, datatype: Datatype, op: AtomicOp) -> Result<usize> {
                atomic::valid_count(
                    AtomicClass::Compare,
                    op,
                    datatype,
                    crate::limits::MAX_ATOMIC_SIZE,
                )
            }
        }
    };
}

atomic_tx!(Endpoint);
atomic_tx!(TxContext);
