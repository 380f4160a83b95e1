//! Bit flags with libfabric's bit values, so they translate 1:1 to and from C.
//!
//! libfabric reuses one 64-bit space for capabilities, operation flags and completion
//! flags; each set here is the subset that is meaningful in its place.

use bitflags::bitflags;

bitflags! {
    /// Capabilities (`FI_MSG`, `FI_TAGGED`, ...) requested in hints and granted in an `Info`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Caps: u64 {
        /// `FI_MSG`: send/receive messages.
        const MSG = 1 << 1;
        /// `FI_RMA`: remote memory access.
        const RMA = 1 << 2;
        /// `FI_TAGGED`: tagged messages.
        const TAGGED = 1 << 3;
        /// `FI_ATOMIC`: remote atomic operations.
        const ATOMIC = 1 << 4;
        /// `FI_MULTICAST`.
        const MULTICAST = 1 << 5;
        /// `FI_COLLECTIVE`.
        const COLLECTIVE = 1 << 6;
        /// `FI_READ`: initiate reads.
        const READ = 1 << 8;
        /// `FI_WRITE`: initiate writes.
        const WRITE = 1 << 9;
        /// `FI_RECV`: receive.
        const RECV = 1 << 10;
        /// `FI_SEND`: send.
        const SEND = 1 << 11;
        /// `FI_REMOTE_READ`: be the target of reads.
        const REMOTE_READ = 1 << 12;
        /// `FI_REMOTE_WRITE`: be the target of writes.
        const REMOTE_WRITE = 1 << 13;
        /// `FI_MULTI_RECV`: multi-receive buffers.
        const MULTI_RECV = 1 << 16;
        /// `FI_TRIGGER`: triggered operations.
        const TRIGGER = 1 << 20;
        /// `FI_FENCE`: fenced operations.
        const FENCE = 1 << 21;
        /// `FI_LOCAL_COMM`: communication within the node.
        const LOCAL_COMM = 1 << 51;
        /// `FI_REMOTE_COMM`: communication across nodes.
        const REMOTE_COMM = 1 << 52;
        /// `FI_SHARED_AV`: named address vectors shared between processes/objects.
        const SHARED_AV = 1 << 53;
        /// `FI_RMA_EVENT`: RMA targets generate events.
        const RMA_EVENT = 1 << 56;
        /// `FI_SOURCE`: the source address of received messages is reported.
        const SOURCE = 1 << 57;
        /// `FI_NAMED_RX_CTX`: receive contexts addressable with `fi_rx_addr`.
        const NAMED_RX_CTX = 1 << 58;
        /// `FI_DIRECTED_RECV`: receives may name the peer they accept from.
        const DIRECTED_RECV = 1 << 59;
    }
}

impl Caps {
    /// The primary capabilities: what an endpoint can do.
    pub const PRIMARY: Caps = Caps::MSG
        .union(Caps::RMA)
        .union(Caps::TAGGED)
        .union(Caps::ATOMIC)
        .union(Caps::MULTICAST)
        .union(Caps::COLLECTIVE)
        .union(Caps::READ)
        .union(Caps::WRITE)
        .union(Caps::RECV)
        .union(Caps::SEND)
        .union(Caps::REMOTE_READ)
        .union(Caps::REMOTE_WRITE)
        .union(Caps::MULTI_RECV)
        .union(Caps::TRIGGER)
        .union(Caps::FENCE)
        .union(Caps::RMA_EVENT)
        .union(Caps::SOURCE)
        .union(Caps::NAMED_RX_CTX)
        .union(Caps::DIRECTED_RECV)
        .union(Caps::SHARED_AV);
    /// The secondary capabilities a provider may grant unasked.
    pub const SECONDARY: Caps = Caps::LOCAL_COMM.union(Caps::REMOTE_COMM);
}

bitflags! {
    /// Flags of `fi_getinfo` ([`getinfo_node`](crate::domain::getinfo_node)).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct InfoFlags: u64 {
        /// `FI_SOURCE`: node and service name the local (source) address, not a peer.
        const SOURCE = 1 << 57;
    }
}

bitflags! {
    /// Mode bits (`FI_CONTEXT`, `FI_RX_CQ_DATA`, ...): requirements the application accepts.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Mode: u64 {
        /// `FI_CONTEXT`: the app provides a `fi_context` with each operation.
        const CONTEXT = 1 << 59;
        /// `FI_MSG_PREFIX`: buffers carry a provider prefix.
        const MSG_PREFIX = 1 << 58;
        /// `FI_ASYNC_IOV`: iovecs must stay valid until completion.
        const ASYNC_IOV = 1 << 57;
        /// `FI_RX_CQ_DATA`: remote CQ data consumes a receive buffer.
        const RX_CQ_DATA = 1 << 56;
        /// `FI_LOCAL_MR`: local buffers must be registered (legacy).
        const LOCAL_MR = 1 << 55;
        /// `FI_NOTIFY_FLAGS_ONLY`.
        const NOTIFY_FLAGS_ONLY = 1 << 54;
        /// `FI_RESTRICTED_COMP`.
        const RESTRICTED_COMP = 1 << 53;
        /// `FI_CONTEXT2`.
        const CONTEXT2 = 1 << 52;
        /// `FI_BUFFERED_RECV`.
        const BUFFERED_RECV = 1 << 51;
    }
}

bitflags! {
    /// Operation flags passed to the `*msg` calls and set as endpoint defaults
    /// (`FI_COMPLETION`, `FI_INJECT`, `FI_DELIVERY_COMPLETE`, `FI_PEEK`, ...).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct OpFlags: u64 {
        /// `FI_MULTI_RECV`: the buffer receives several messages.
        const MULTI_RECV = 1 << 16;
        /// `FI_REMOTE_CQ_DATA`: the operation carries remote CQ data.
        const REMOTE_CQ_DATA = 1 << 17;
        /// `FI_MORE`: more operations follow immediately.
        const MORE = 1 << 18;
        /// `FI_PEEK`: look for a matching unexpected message without consuming it.
        const PEEK = 1 << 19;
        /// `FI_TRIGGER`: a triggered operation.
        const TRIGGER = 1 << 20;
        /// `FI_FENCE`: wait for all earlier operations before starting.
        const FENCE = 1 << 21;
        /// `FI_COMPLETION`: generate a completion (with selective completion).
        const COMPLETION = 1 << 24;
        /// `FI_INJECT`: the buffer may be reused when the call returns.
        const INJECT = 1 << 25;
        /// `FI_INJECT_COMPLETE`: complete when the buffer may be reused.
        const INJECT_COMPLETE = 1 << 26;
        /// `FI_TRANSMIT_COMPLETE`: complete when the data has left the initiator.
        const TRANSMIT_COMPLETE = 1 << 27;
        /// `FI_DELIVERY_COMPLETE`: complete when the data reached the target.
        const DELIVERY_COMPLETE = 1 << 28;
        /// `FI_MATCH_COMPLETE`.
        const MATCH_COMPLETE = 1 << 31;
        /// `FI_DISCARD`: with `FI_PEEK|FI_CLAIM`, drop the message.
        const DISCARD = 1 << 58;
        /// `FI_CLAIM`: claim a message found by `FI_PEEK`.
        const CLAIM = 1 << 59;
    }
}

impl OpFlags {
    /// `FI_INJECT` as the `fi_inject*` calls pass it: they never write a success
    /// completion, while a `*msg` call or an endpoint default with `FI_INJECT` only frees
    /// the buffer early and completes as usual (fi_msg(3)). The extra bit is no libfabric
    /// flag; it stays inside the crate.
    pub(crate) const INJECT_CALL: OpFlags =
        OpFlags::from_bits_retain(OpFlags::INJECT.bits() | 1 << 62);
}

bitflags! {
    /// Flags reported in completion entries (`FI_SEND`, `FI_RECV`, `FI_TAGGED`, ...).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    #[repr(transparent)]
    pub struct CqFlags: u64 {
        /// `FI_MSG`.
        const MSG = 1 << 1;
        /// `FI_RMA`.
        const RMA = 1 << 2;
        /// `FI_TAGGED`.
        const TAGGED = 1 << 3;
        /// `FI_ATOMIC`.
        const ATOMIC = 1 << 4;
        /// `FI_READ`.
        const READ = 1 << 8;
        /// `FI_WRITE`.
        const WRITE = 1 << 9;
        /// `FI_RECV`.
        const RECV = 1 << 10;
        /// `FI_SEND`.
        const SEND = 1 << 11;
        /// `FI_REMOTE_READ`.
        const REMOTE_READ = 1 << 12;
        /// `FI_REMOTE_WRITE`.
        const REMOTE_WRITE = 1 << 13;
        /// `FI_MULTI_RECV`: the multi-receive buffer has been released.
        const MULTI_RECV = 1 << 16;
        /// `FI_REMOTE_CQ_DATA`: the `data` field is valid.
        const REMOTE_CQ_DATA = 1 << 17;
        /// `FI_CLAIM`.
        const CLAIM = 1 << 59;
    }
}

bitflags! {
    /// Flags of `bind` calls (`FI_TRANSMIT`, `FI_RECV`, `FI_SELECTIVE_COMPLETION`, counter events).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct BindFlags: u64 {
        /// `FI_READ`: count/complete local reads.
        const READ = 1 << 8;
        /// `FI_WRITE`: count/complete local writes.
        const WRITE = 1 << 9;
        /// `FI_RECV`: receive completions.
        const RECV = 1 << 10;
        /// `FI_TRANSMIT` (`FI_SEND`): transmit completions.
        const TRANSMIT = 1 << 11;
        /// `FI_REMOTE_READ`: count remote reads of local memory.
        const REMOTE_READ = 1 << 12;
        /// `FI_REMOTE_WRITE`: count remote writes of local memory.
        const REMOTE_WRITE = 1 << 13;
        /// `FI_SELECTIVE_COMPLETION`: only operations with `FI_COMPLETION` complete.
        const SELECTIVE_COMPLETION = 1 << 59;
    }
}

bitflags! {
    /// Memory-region access rights (`FI_SEND`, `FI_RECV`, `FI_READ`, `FI_WRITE`, `FI_REMOTE_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct MrAccess: u64 {
        /// `FI_READ`: local reads into (RMA read targets locally).
        const READ = 1 << 8;
        /// `FI_WRITE`: local source of RMA writes.
        const WRITE = 1 << 9;
        /// `FI_RECV`: receive buffer.
        const RECV = 1 << 10;
        /// `FI_SEND`: send buffer.
        const SEND = 1 << 11;
        /// `FI_REMOTE_READ`: peers may read.
        const REMOTE_READ = 1 << 12;
        /// `FI_REMOTE_WRITE`: peers may write (and apply atomics).
        const REMOTE_WRITE = 1 << 13;
    }
}

bitflags! {
    /// Memory-registration modes of a domain (`FI_MR_LOCAL`, `FI_MR_VIRT_ADDR`, `FI_MR_PROV_KEY`, ...).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct MrMode: u32 {
        /// `FI_MR_LOCAL`: local buffers need a descriptor.
        const LOCAL = 1 << 2;
        /// `FI_MR_RAW`.
        const RAW = 1 << 3;
        /// `FI_MR_VIRT_ADDR`: remote addresses are virtual addresses, not offsets.
        const VIRT_ADDR = 1 << 4;
        /// `FI_MR_ALLOCATED`: only allocated memory may be registered.
        const ALLOCATED = 1 << 5;
        /// `FI_MR_PROV_KEY`: the provider chooses keys.
        const PROV_KEY = 1 << 6;
        /// `FI_MR_MMU_NOTIFY`.
        const MMU_NOTIFY = 1 << 7;
        /// `FI_MR_RMA_EVENT`: MRs must be bound and enabled to generate RMA events.
        const RMA_EVENT = 1 << 8;
        /// `FI_MR_ENDPOINT`: MRs are bound to an endpoint and enabled.
        const ENDPOINT = 1 << 9;
        /// `FI_MR_HMEM`.
        const HMEM = 1 << 10;
    }
}

bitflags! {
    /// Message ordering (`FI_ORDER_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Order: u64 {
        /// `FI_ORDER_RAR`.
        const RAR = 1 << 0;
        /// `FI_ORDER_RAW`.
        const RAW = 1 << 1;
        /// `FI_ORDER_RAS`.
        const RAS = 1 << 2;
        /// `FI_ORDER_WAR`.
        const WAR = 1 << 3;
        /// `FI_ORDER_WAW`.
        const WAW = 1 << 4;
        /// `FI_ORDER_WAS`.
        const WAS = 1 << 5;
        /// `FI_ORDER_SAR`.
        const SAR = 1 << 6;
        /// `FI_ORDER_SAW`.
        const SAW = 1 << 7;
        /// `FI_ORDER_SAS`.
        const SAS = 1 << 8;
        /// `FI_ORDER_DATA`.
        const DATA = 1 << 16;
    }
}

impl Order {
    /// `FI_ORDER_STRICT`: all of the above orderings of the first nine bits.
    pub const STRICT: Order = Order::from_bits_truncate(0x1FF);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_values_match_libfabric() {
        assert_eq!(Caps::TAGGED.bits(), 1 << 3);
        assert_eq!(Caps::DIRECTED_RECV.bits(), 1 << 59);
        assert_eq!(OpFlags::DELIVERY_COMPLETE.bits(), 1 << 28);
        assert_eq!(OpFlags::CLAIM.bits(), Caps::DIRECTED_RECV.bits());
        assert_eq!(CqFlags::REMOTE_CQ_DATA.bits(), 1 << 17);
        assert_eq!(BindFlags::SELECTIVE_COMPLETION.bits(), 1 << 59);
        assert_eq!(MrMode::PROV_KEY.bits(), 1 << 6);
        assert_eq!(Order::STRICT.bits(), 0x1FF);
    }
}

macro_rules! const_default_empty {
    ($($t:ty),*) => {$(
        impl const_default::ConstDefault for $t {
            const DEFAULT: Self = Self::empty();
        }
    )*};
}
const_default_empty!(Caps, Mode, OpFlags, CqFlags, BindFlags, MrAccess, MrMode, Order);
