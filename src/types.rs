//! Small value types shared by every object: addresses, contexts, keys.

/// `fi_addr_t`: a peer address as returned by an address vector.
///
/// For [`Table`](crate::Table) AVs it is an index; for [`Map`](crate::Map) AVs an
/// opaque handle. The top `rx_ctx_bits` may select a receive context ([`FiAddr::rx_addr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct FiAddr(pub u64);

/// The default address is [`FiAddr::NOTAVAIL`] ("no address"), the value an entry
/// carries when the source is unknown.
impl Default for FiAddr {
    #[inline]
    fn default() -> FiAddr {
        FiAddr::NOTAVAIL
    }
}

impl FiAddr {
    /// `FI_ADDR_UNSPEC`: no particular peer (receive from anyone, unconnected send is invalid).
    pub const UNSPEC: FiAddr = FiAddr(u64::MAX);
    /// `FI_ADDR_NOTAVAIL`: the source address is unknown.
    pub const NOTAVAIL: FiAddr = FiAddr(u64::MAX);

    /// `fi_rx_addr`: the address of receive context `rx_index` of the peer `self`,
    /// for an AV opened with `rx_ctx_bits`.
    ///
    /// ```
    /// use fabric::FiAddr;
    /// let a = FiAddr(3).rx_addr(2, 4);
    /// assert_eq!(a.0, 3 | (2 << 60));
    /// assert_eq!(a.split_rx(4), (FiAddr(3), 2));
    /// ```
    #[inline]
    pub const fn rx_addr(self, rx_index: u32, rx_ctx_bits: u32) -> FiAddr {
        if rx_ctx_bits == 0 {
            return self;
        }
        FiAddr(self.0 | ((rx_index as u64) << (64 - rx_ctx_bits)))
    }

    /// Splits an address made by [`FiAddr::rx_addr`] into the peer and the rx index.
    #[inline]
    pub const fn split_rx(self, rx_ctx_bits: u32) -> (FiAddr, u32) {
        if rx_ctx_bits == 0 || self.0 == u64::MAX {
            return (self, 0);
        }
        let shift = 64 - rx_ctx_bits;
        (
            FiAddr(self.0 & ((1u64 << shift) - 1)),
            (self.0 >> shift) as u32,
        )
    }
}

/// The application's operation context (`void *op_context`), returned in completions.
///
/// It is pointer-sized so that CQ entries keep libfabric's layout; store a pointer
/// or an index in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(transparent)]
pub struct Context(pub usize);

impl Context {
    /// The null context.
    pub const NULL: Context = Context(0);
}

impl From<usize> for Context {
    fn from(v: usize) -> Context {
        Context(v)
    }
}

/// A remote memory key (`uint64_t key` of fi_rma).
pub type MrKey = u64;

/// `FI_KEY_NOTAVAIL`.
pub const KEY_NOTAVAIL: MrKey = u64::MAX;
