//! The data-transfer calls: msg, tagged, RMA, atomics, triggered operations.
//!
//! Every call builds a request and hands it to one `#[inline]` posting function, so a
//! monomorphized `tinject` folds to the checks and copies it needs and nothing else.
//! The `unsafe` calls here only record buffer addresses; their contracts are what make
//! the later writes in `mem` sound.
#![allow(unsafe_code)]

use crate::atomic::{self, AtomicClass, AtomicOp, Datatype};
use crate::cntr::Counter;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::flags::OpFlags;
use crate::lock::Lock;
use crate::mem::RawIov;
use crate::provider::InjectFits;
use crate::types::{Context, FiAddr, MrKey};
use crate::wire::{Op, HDR_COMPARE, HDR_FETCH};

use super::owned::{OwnedTx, RmaIov, RxReq, TxReq};
use super::{Deferred, DeferredOp, Endpoint, RxContext, TxContext};

/// `struct fi_msg` for sends (`fi_sendmsg`, `fi_tsendmsg` use [`TaggedMsg`]).
#[derive(Debug, Clone, Copy)]
pub struct Msg<'a> {
    /// Gather list.
    pub iov: &'a [&'a [u8]],
    /// Destination.
    pub addr: FiAddr,
    /// Operation context.
    pub context: Context,
    /// Remote CQ data (sent with `FI_REMOTE_CQ_DATA`).
    pub data: u64,
}

/// `struct fi_msg` for receives.
#[derive(Debug)]
pub struct MsgMut<'a> {
    /// Scatter list.
    pub iov: &'a mut [&'a mut [u8]],
    /// Source to accept (`FiAddr::UNSPEC`: any; needs `FI_DIRECTED_RECV`).
    pub addr: FiAddr,
    /// Operation context.
    pub context: Context,
}

/// `struct fi_msg_tagged` for sends.
#[derive(Debug, Clone, Copy)]
pub struct TaggedMsg<'a> {
    /// Gather list.
    pub iov: &'a [&'a [u8]],
    /// Destination.
    pub addr: FiAddr,
    /// Tag.
    pub tag: u64,
    /// Operation context.
    pub context: Context,
    /// Remote CQ data (with `FI_REMOTE_CQ_DATA`).
    pub data: u64,
}

/// `struct fi_msg_tagged` for receives.
#[derive(Debug)]
pub struct TaggedMsgMut<'a> {
    /// Scatter list.
    pub iov: &'a mut [&'a mut [u8]],
    /// Source to accept.
    pub addr: FiAddr,
    /// Tag.
    pub tag: u64,
    /// Bits of the tag to ignore.
    pub ignore: u64,
    /// Operation context (with `FI_CLAIM`: the context used at `FI_PEEK | FI_CLAIM`).
    pub context: Context,
}

/// `struct fi_msg_rma` for writes.
#[derive(Debug, Clone, Copy)]
pub struct RmaMsg<'a> {
    /// Local gather list.
    pub iov: &'a [&'a [u8]],
    /// Target.
    pub addr: FiAddr,
    /// Remote segment (one: `rma_iov_limit` is 1).
    pub rma_iov: RmaIov,
    /// Operation context.
    pub context: Context,
    /// Remote CQ data (with `FI_REMOTE_CQ_DATA`).
    pub data: u64,
}

/// `struct fi_msg_rma` for reads.
#[derive(Debug)]
pub struct RmaMsgMut<'a> {
    /// Local scatter list.
    pub iov: &'a mut [&'a mut [u8]],
    /// Target.
    pub addr: FiAddr,
    /// Remote segment.
    pub rma_iov: RmaIov,
    /// Operation context.
    pub context: Context,
}

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

#[inline(always)]
fn data_of(flags: OpFlags, d: u64) -> Option<u64> {
    flags.contains(OpFlags::REMOTE_CQ_DATA).then_some(d)
}

#[inline(always)]
fn req<'a>(op: Op, iov: &'a [&'a [u8]], dest: FiAddr, ctx: Context) -> TxReq<'a> {
    TxReq {
        op,
        iov,
        compare: &[],
        result: RawIov::EMPTY,
        dest,
        tag: 0,
        data: None,
        rma: RmaIov::default(),
        atomic: (0, 0, 0),
        ctx,
    }
}

/// The checks of `fi_atomic(3)` every atomic passes before anything else: the
/// combination is valid for `class` (else `FI_EOPNOTSUPP`), and the `n` bytes it
/// touches at the target (`operand` bytes, or `result` bytes for `FI_ATOMIC_READ`) are
/// a whole, non-zero number of elements within the limit, matched by `compare` and
/// `result` where the class has them (else `FI_EINVAL`). Returns `n`.
#[inline(always)]
fn atomic_len(
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
    if n == 0 || !n.is_multiple_of(size) || n > crate::domain::MAX_ATOMIC_SIZE {
        return Err(Error::Inval);
    }
    if (class == AtomicClass::Compare && compare != n)
        || (class != AtomicClass::Base && result != n)
    {
        return Err(Error::Inval);
    }
    Ok(n)
}

fn atomic_req<'a>(
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

macro_rules! tx_calls {
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
            /// `fi_send`: the buffer is copied before the call returns.
            #[inline]
            pub fn send(&self, buf: &[u8], dest: FiAddr, context: Context) -> Result<()> {
                self.ep().post_eager::<false, false>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    None,
                    context,
                    self.tx_flags,
                )
            }
            /// `fi_sendv`.
            #[inline]
            pub fn sendv(&self, iov: &[&[u8]], dest: FiAddr, context: Context) -> Result<()> {
                self.ep()
                    .post_tx(self.txi(), &req(Op::Msg, iov, dest, context), self.tx_flags)
            }
            /// `fi_sendmsg` with explicit operation flags.
            #[inline]
            pub fn sendmsg(&self, msg: &Msg<'_>, flags: OpFlags) -> Result<()> {
                let mut r = req(Op::Msg, msg.iov, msg.addr, msg.context);
                r.data = data_of(flags, msg.data);
                self.ep().post_tx(self.txi(), &r, flags)
            }
            /// `fi_inject`: no completion; at most `inject_size` bytes.
            #[inline]
            pub fn inject(&self, buf: &[u8], dest: FiAddr) -> Result<()> {
                self.ep().post_eager::<true, false>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    None,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_senddata`: with remote CQ data.
            #[inline]
            pub fn senddata(
                &self,
                buf: &[u8],
                data: u64,
                dest: FiAddr,
                context: Context,
            ) -> Result<()> {
                self.ep().post_eager::<false, false>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    Some(data),
                    context,
                    self.tx_flags,
                )
            }
            /// `fi_injectdata`.
            #[inline]
            pub fn injectdata(&self, buf: &[u8], data: u64, dest: FiAddr) -> Result<()> {
                self.ep().post_eager::<true, false>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    Some(data),
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_tsend`.
            #[inline]
            pub fn tsend(
                &self,
                buf: &[u8],
                dest: FiAddr,
                tag: u64,
                context: Context,
            ) -> Result<()> {
                self.ep().post_eager::<false, false>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    None,
                    context,
                    self.tx_flags,
                )
            }
            /// `fi_tsendv`.
            #[inline]
            pub fn tsendv(
                &self,
                iov: &[&[u8]],
                dest: FiAddr,
                tag: u64,
                context: Context,
            ) -> Result<()> {
                let mut r = req(Op::Tagged, iov, dest, context);
                r.tag = tag;
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_tsendmsg`.
            #[inline]
            pub fn tsendmsg(&self, msg: &TaggedMsg<'_>, flags: OpFlags) -> Result<()> {
                let mut r = req(Op::Tagged, msg.iov, msg.addr, msg.context);
                r.tag = msg.tag;
                r.data = data_of(flags, msg.data);
                self.ep().post_tx(self.txi(), &r, flags)
            }
            /// `fi_tinject`.
            #[inline]
            pub fn tinject(&self, buf: &[u8], dest: FiAddr, tag: u64) -> Result<()> {
                self.ep().post_eager::<true, false>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    None,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_inject` of a fixed-size array: an array longer than the provider's
            /// [`InjectSize`](crate::Provider::InjectSize) does not compile, and the
            /// posting path carries no length test. Smaller per-endpoint limits requested
            /// through hints (`tx_attr.inject_size`, `max_msg_size`) are not applied: the
            /// provider's limit is what the type proves.
            #[inline]
            pub fn inject_array<const N: usize>(&self, buf: &[u8; N], dest: FiAddr) -> Result<()>
            where
                typenum::Const<N>: InjectFits<<S as Config>::Provider>,
            {
                self.ep().post_eager::<true, true>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    None,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_injectdata` of a fixed-size array, as [`Self::inject_array`].
            #[inline]
            pub fn injectdata_array<const N: usize>(
                &self,
                buf: &[u8; N],
                data: u64,
                dest: FiAddr,
            ) -> Result<()>
            where
                typenum::Const<N>: InjectFits<<S as Config>::Provider>,
            {
                self.ep().post_eager::<true, true>(
                    self.txi(),
                    Op::Msg,
                    buf,
                    dest,
                    0,
                    Some(data),
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_tinject` of a fixed-size array, as [`Self::inject_array`]:
            ///
            /// ```compile_fail
            /// # use fabric::prelude::*;
            /// # fn f(ep: &Endpoint<Stack<fabric_loopback::Loopback>>, to: FiAddr) {
            /// ep.tinject_array(&[0u8; 8192], to, 7); // Loopback::InjectSize is 4096
            /// # }
            /// ```
            #[inline]
            pub fn tinject_array<const N: usize>(
                &self,
                buf: &[u8; N],
                dest: FiAddr,
                tag: u64,
            ) -> Result<()>
            where
                typenum::Const<N>: InjectFits<<S as Config>::Provider>,
            {
                self.ep().post_eager::<true, true>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    None,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_tinjectdata` of a fixed-size array, as [`Self::inject_array`].
            #[inline]
            pub fn tinjectdata_array<const N: usize>(
                &self,
                buf: &[u8; N],
                data: u64,
                dest: FiAddr,
                tag: u64,
            ) -> Result<()>
            where
                typenum::Const<N>: InjectFits<<S as Config>::Provider>,
            {
                self.ep().post_eager::<true, true>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    Some(data),
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_tsenddata`.
            #[inline]
            pub fn tsenddata(
                &self,
                buf: &[u8],
                data: u64,
                dest: FiAddr,
                tag: u64,
                context: Context,
            ) -> Result<()> {
                self.ep().post_eager::<false, false>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    Some(data),
                    context,
                    self.tx_flags,
                )
            }
            /// `fi_tinjectdata`.
            #[inline]
            pub fn tinjectdata(&self, buf: &[u8], data: u64, dest: FiAddr, tag: u64) -> Result<()> {
                self.ep().post_eager::<true, false>(
                    self.txi(),
                    Op::Tagged,
                    buf,
                    dest,
                    tag,
                    Some(data),
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_write`: the local buffer is copied before the call returns; completion
            /// (or an error entry for a bad key, range or permission) follows the target's
            /// acknowledgement.
            #[inline]
            pub fn write(
                &self,
                buf: &[u8],
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let rma = RmaIov {
                    addr,
                    len: buf.len(),
                    key,
                };
                self.ep()
                    .post_write::<false>(self.txi(), buf, dest, rma, context, self.tx_flags)
            }
            /// `fi_writev`.
            #[inline]
            pub fn writev(
                &self,
                iov: &[&[u8]],
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let mut r = req(Op::Write, iov, dest, context);
                r.rma = RmaIov {
                    addr,
                    len: iov.iter().map(|s| s.len()).sum(),
                    key,
                };
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_writemsg`.
            #[inline]
            pub fn writemsg(&self, msg: &RmaMsg<'_>, flags: OpFlags) -> Result<()> {
                let mut r = req(Op::Write, msg.iov, msg.addr, msg.context);
                r.rma = msg.rma_iov;
                r.data = data_of(flags, msg.data);
                self.ep().post_tx(self.txi(), &r, flags)
            }
            /// `fi_inject_write`: no completion on success; a failure at the target is
            /// reported as an error entry with a null context.
            #[inline]
            pub fn inject_write(
                &self,
                buf: &[u8],
                dest: FiAddr,
                addr: u64,
                key: MrKey,
            ) -> Result<()> {
                let rma = RmaIov {
                    addr,
                    len: buf.len(),
                    key,
                };
                self.ep().post_write::<true>(
                    self.txi(),
                    buf,
                    dest,
                    rma,
                    Context::NULL,
                    self.tx_flags | OpFlags::INJECT_CALL,
                )
            }
            /// `fi_writedata`: the target gets a CQ entry with `data`.
            #[inline]
            pub fn writedata(
                &self,
                buf: &[u8],
                data: u64,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let b = [buf];
                let mut r = req(Op::Write, &b, dest, context);
                r.rma = RmaIov {
                    addr,
                    len: buf.len(),
                    key,
                };
                r.data = Some(data);
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_inject_writedata`.
            #[inline]
            pub fn inject_writedata(
                &self,
                buf: &[u8],
                data: u64,
                dest: FiAddr,
                addr: u64,
                key: MrKey,
            ) -> Result<()> {
                let b = [buf];
                let mut r = req(Op::Write, &b, dest, Context::NULL);
                r.rma = RmaIov {
                    addr,
                    len: buf.len(),
                    key,
                };
                r.data = Some(data);
                self.ep()
                    .post_tx(self.txi(), &r, self.tx_flags | OpFlags::INJECT_CALL)
            }
            /// `fi_read`.
            ///
            /// # Safety
            /// `buf` must stay valid and must not be read or written until the operation
            /// completes (success, error or cancel) or the endpoint is dropped.
            #[inline]
            pub unsafe fn read(
                &self,
                buf: &mut [u8],
                src: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let len = buf.len();
                let mut r = req(Op::ReadReq, &[], src, context);
                r.result = RawIov::one(buf);
                r.rma = RmaIov { addr, len, key };
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_readv`.
            ///
            /// # Safety
            /// As [`Self::read`], for every buffer.
            #[inline]
            pub unsafe fn readv(
                &self,
                iov: &mut [&mut [u8]],
                src: FiAddr,
                addr: u64,
                key: MrKey,
                context: Context,
            ) -> Result<()> {
                let mut r = req(Op::ReadReq, &[], src, context);
                r.result = RawIov::many(iov)?;
                r.rma = RmaIov {
                    addr,
                    len: r.result.len(),
                    key,
                };
                self.ep().post_tx(self.txi(), &r, self.tx_flags)
            }
            /// `fi_readmsg`.
            ///
            /// # Safety
            /// As [`Self::read`], for every buffer.
            #[inline]
            pub unsafe fn readmsg(&self, msg: &mut RmaMsgMut<'_>, flags: OpFlags) -> Result<()> {
                let mut r = req(Op::ReadReq, &[], msg.addr, msg.context);
                r.result = RawIov::many(msg.iov)?;
                if r.result.len() != msg.rma_iov.len {
                    return Err(Error::Inval);
                }
                r.rma = msg.rma_iov;
                self.ep().post_tx(self.txi(), &r, flags)
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
                    crate::domain::MAX_ATOMIC_SIZE,
                )
            }
            /// `fi_fetch_atomicvalid`.
            pub fn fetch_atomicvalid(&self, datatype: Datatype, op: AtomicOp) -> Result<usize> {
                atomic::valid_count(
                    AtomicClass::Fetch,
                    op,
                    datatype,
                    crate::domain::MAX_ATOMIC_SIZE,
                )
            }
            /// `fi_compare_atomicvalid`.
            pub fn compare_atomicvalid(&self, datatype: Datatype, op: AtomicOp) -> Result<usize> {
                atomic::valid_count(
                    AtomicClass::Compare,
                    op,
                    datatype,
                    crate::domain::MAX_ATOMIC_SIZE,
                )
            }
            /// A triggered send (`fi_tsendmsg`/`fi_sendmsg` with `FI_TRIGGER`): the
            /// message is copied now and sent once `cntr` reaches `threshold`.
            pub fn tsendmsg_triggered(
                &self,
                msg: &TaggedMsg<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let mut r = req(Op::Tagged, msg.iov, msg.addr, msg.context);
                r.tag = msg.tag;
                r.data = data_of(flags, msg.data);
                self.defer_tx(&r, flags, cntr, threshold)
            }
            /// A triggered untagged send.
            pub fn sendmsg_triggered(
                &self,
                msg: &Msg<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let mut r = req(Op::Msg, msg.iov, msg.addr, msg.context);
                r.data = data_of(flags, msg.data);
                self.defer_tx(&r, flags, cntr, threshold)
            }
            /// A triggered RMA write.
            pub fn writemsg_triggered(
                &self,
                msg: &RmaMsg<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let mut r = req(Op::Write, msg.iov, msg.addr, msg.context);
                r.rma = msg.rma_iov;
                r.data = data_of(flags, msg.data);
                self.defer_tx(&r, flags, cntr, threshold)
            }
            /// A triggered base atomic.
            pub fn atomicmsg_triggered(
                &self,
                m: &AtomicMsg<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                // As `fi_atomicmsg`: no remote CQ data on atomics.
                if flags.contains(OpFlags::REMOTE_CQ_DATA) {
                    return Err(Error::OpNotSupp);
                }
                let iov = [m.operand];
                let r = atomic_req(AtomicClass::Base, &iov, &[], RawIov::EMPTY, m)?;
                self.defer_tx(&r, flags, cntr, threshold)
            }
            fn defer_tx(
                &self,
                r: &TxReq<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let ep = self.arc();
                if !std::sync::Arc::ptr_eq(&ep.domain, &cntr.inner.domain) {
                    return Err(Error::Domain);
                }
                let d = Deferred {
                    threshold,
                    ep,
                    idx: self.txi(),
                    op: DeferredOp::Tx(OwnedTx::from_req(r, flags & !OpFlags::TRIGGER)),
                };
                cntr.inner.triggers.with(|t| t.push(d));
                cntr.inner.domain.add_trigger_cntr(&cntr.inner);
                cntr.inner.domain.run_triggers();
                Ok(())
            }
        }
    };
}

macro_rules! rx_calls {
    ($ty:ident) => {
        impl<S: Config> $ty<S> {
            /// `fi_recv`.
            ///
            /// # Safety
            /// `buf` must stay valid and must not be read or written until the receive
            /// completes (success, error or cancel) or the endpoint is dropped.
            #[inline]
            pub unsafe fn recv(&self, buf: &mut [u8], src: FiAddr, context: Context) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::one(buf),
                    src,
                    tag: 0,
                    ignore: 0,
                    ctx: context,
                    tagged: false,
                };
                self.ep().post_rx(self.rxi(), &r, self.rx_flags)
            }
            /// `fi_recvv`.
            ///
            /// # Safety
            /// As [`Self::recv`], for every buffer.
            #[inline]
            pub unsafe fn recvv(
                &self,
                iov: &mut [&mut [u8]],
                src: FiAddr,
                context: Context,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(iov)?,
                    src,
                    tag: 0,
                    ignore: 0,
                    ctx: context,
                    tagged: false,
                };
                self.ep().post_rx(self.rxi(), &r, self.rx_flags)
            }
            /// `fi_recvmsg` (`FI_MULTI_RECV` supported).
            ///
            /// # Safety
            /// As [`Self::recv`], for every buffer.
            #[inline]
            pub unsafe fn recvmsg(&self, msg: &mut MsgMut<'_>, flags: OpFlags) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(msg.iov)?,
                    src: msg.addr,
                    tag: 0,
                    ignore: 0,
                    ctx: msg.context,
                    tagged: false,
                };
                self.ep().post_rx(self.rxi(), &r, flags)
            }
            /// `fi_trecv`: accepts tags equal to `tag` outside the `ignore` bits.
            ///
            /// # Safety
            /// As [`Self::recv`].
            #[inline]
            pub unsafe fn trecv(
                &self,
                buf: &mut [u8],
                src: FiAddr,
                tag: u64,
                ignore: u64,
                context: Context,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::one(buf),
                    src,
                    tag,
                    ignore,
                    ctx: context,
                    tagged: true,
                };
                self.ep().post_rx(self.rxi(), &r, self.rx_flags)
            }
            /// `fi_trecvv`.
            ///
            /// # Safety
            /// As [`Self::recv`], for every buffer.
            #[inline]
            pub unsafe fn trecvv(
                &self,
                iov: &mut [&mut [u8]],
                src: FiAddr,
                tag: u64,
                ignore: u64,
                context: Context,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(iov)?,
                    src,
                    tag,
                    ignore,
                    ctx: context,
                    tagged: true,
                };
                self.ep().post_rx(self.rxi(), &r, self.rx_flags)
            }
            /// `fi_trecvmsg`, with `FI_PEEK`, `FI_CLAIM`, `FI_DISCARD`.
            ///
            /// # Safety
            /// As [`Self::recv`], for every buffer (none are touched by a plain peek).
            #[inline]
            pub unsafe fn trecvmsg(
                &self,
                msg: &mut TaggedMsgMut<'_>,
                flags: OpFlags,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(msg.iov)?,
                    src: msg.addr,
                    tag: msg.tag,
                    ignore: msg.ignore,
                    ctx: msg.context,
                    tagged: true,
                };
                self.ep().post_rx(self.rxi(), &r, flags)
            }
            /// A triggered tagged receive, posted once `cntr` reaches `threshold`.
            ///
            /// # Safety
            /// As [`Self::recv`]; the buffer must stay valid from now on.
            pub unsafe fn trecvmsg_triggered(
                &self,
                msg: &mut TaggedMsgMut<'_>,
                flags: OpFlags,
                cntr: &Counter<S>,
                threshold: u64,
            ) -> Result<()> {
                let r = RxReq {
                    iov: RawIov::many(msg.iov)?,
                    src: msg.addr,
                    tag: msg.tag,
                    ignore: msg.ignore,
                    ctx: msg.context,
                    tagged: true,
                };
                let ep = self.arc();
                let d = Deferred {
                    threshold,
                    ep,
                    idx: self.rxi(),
                    op: DeferredOp::Rx(r, flags & !OpFlags::TRIGGER),
                };
                cntr.inner.triggers.with(|t| t.push(d));
                cntr.inner.domain.add_trigger_cntr(&cntr.inner);
                cntr.inner.domain.run_triggers();
                Ok(())
            }
        }
    };
}

impl<S: Config> Endpoint<S> {
    #[inline(always)]
    fn txi(&self) -> usize {
        0
    }
    #[inline(always)]
    fn rxi(&self) -> usize {
        0
    }
    fn arc(&self) -> std::sync::Arc<super::EpInner<S>> {
        self.h.inner.clone()
    }
}
impl<S: Config> TxContext<S> {
    #[inline(always)]
    fn txi(&self) -> usize {
        self.idx
    }
    fn arc(&self) -> std::sync::Arc<super::EpInner<S>> {
        self.h.inner.clone()
    }
}
impl<S: Config> RxContext<S> {
    #[inline(always)]
    fn rxi(&self) -> usize {
        self.idx
    }
    fn arc(&self) -> std::sync::Arc<super::EpInner<S>> {
        self.h.inner.clone()
    }
}

tx_calls!(Endpoint);
tx_calls!(TxContext);
rx_calls!(Endpoint);
rx_calls!(RxContext);
