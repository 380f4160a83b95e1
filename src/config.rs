//! The five type parameters and the [`Stack`] that combines them.
//!
//! ```
//! use fabric::{Stack, ThreadDomain, Manual, CqTagged, Table, Config, Threading};
//! use fabric_loopback::Loopback;
//! type Net = Stack<Loopback, ThreadDomain, Manual, CqTagged, Table>;
//! assert_eq!(<Net as Config>::Threading::LEVEL, fabric::attr::ThreadingLevel::Domain);
//! ```

use core::marker::PhantomData;

use crate::attr::{ProgressMode, ThreadingLevel};
use crate::av_type::AvType;
use crate::cq_format::CqFormat;
pub use crate::lock::{LockFamily, Locked, Unlocked};
use crate::provider::Provider;

mod sealed {
    pub trait Sealed {}
}

/// The threading parameter `T` (`FI_THREAD_*`). Sealed.
///
/// It picks the lock family and with it whether objects are `Send`/`Sync`:
/// [`ThreadDomain`] objects are neither (the compiler enforces the promise that the
/// application serializes access), the others are both.
pub trait Threading: sealed::Sealed + 'static {
    /// The run-time view.
    const LEVEL: ThreadingLevel;
    /// The locks used with manual progress.
    type Locks: LockFamily;
}

/// `FI_THREAD_SAFE`: any object from any thread; every shared structure is locked.
pub enum ThreadSafe {}
/// `FI_THREAD_DOMAIN`: one thread uses a domain and all its objects; nothing is locked
/// and nothing is `Send` or `Sync`.
pub enum ThreadDomain {}
/// `FI_THREAD_ENDPOINT`: endpoints may be used from different threads, each by one
/// thread at a time. Shared structures (CQs, AVs, counters) are locked.
pub enum ThreadEndpoint {}
/// `FI_THREAD_COMPLETION`: serialization per completion queue; shared structures locked.
pub enum ThreadCompletion {}

impl sealed::Sealed for ThreadSafe {}
impl sealed::Sealed for ThreadDomain {}
impl sealed::Sealed for ThreadEndpoint {}
impl sealed::Sealed for ThreadCompletion {}

impl Threading for ThreadSafe {
    const LEVEL: ThreadingLevel = ThreadingLevel::Safe;
    type Locks = Locked;
}
impl Threading for ThreadDomain {
    const LEVEL: ThreadingLevel = ThreadingLevel::Domain;
    type Locks = Unlocked;
}
impl Threading for ThreadEndpoint {
    const LEVEL: ThreadingLevel = ThreadingLevel::Endpoint;
    type Locks = Locked;
}
impl Threading for ThreadCompletion {
    const LEVEL: ThreadingLevel = ThreadingLevel::Completion;
    type Locks = Locked;
}

/// The progress parameter `R` (`FI_PROGRESS_*`). Sealed.
pub trait Progress: sealed::Sealed + 'static {
    /// The run-time view.
    const MODE: ProgressMode;
    /// Whether a progress thread runs (decided at compile time).
    const AUTO: bool;
    /// The lock family for threading `T` under this progress model: a progress thread
    /// shares every object with the application, so [`Auto`] always locks.
    type Locks<T: Threading>: LockFamily;
}

/// `FI_PROGRESS_MANUAL`: progress happens inside CQ, counter and EQ reads and waits.
pub enum Manual {}
/// `FI_PROGRESS_AUTO`: a progress thread per domain completes operations with no
/// further calls from the application.
pub enum Auto {}

impl sealed::Sealed for Manual {}
impl sealed::Sealed for Auto {}

impl Progress for Manual {
    const MODE: ProgressMode = ProgressMode::Manual;
    const AUTO: bool = false;
    type Locks<T: Threading> = T::Locks;
}
impl Progress for Auto {
    const MODE: ProgressMode = ProgressMode::Auto;
    const AUTO: bool = true;
    type Locks<T: Threading> = Locked;
}

/// A complete configuration: what [`Stack`] implements. Sealed (only `Stack` implements
/// it), because soundness depends on `Locks` matching the threading and progress models.
pub trait Config: sealed::Sealed + Sized + 'static {
    /// Provider `P`.
    type Provider: Provider;
    /// Threading `T`.
    type Threading: Threading;
    /// Progress `R`.
    type Progress: Progress;
    /// CQ format `C`.
    type Cq: CqFormat;
    /// AV type `A`.
    type Av: AvType;
    /// The lock family derived from `T` and `R`.
    type Locks: LockFamily;
}

/// The lock for state `X` under configuration `S`.
pub type LockOf<S, X> = <<S as Config>::Locks as LockFamily>::Lock<X>;

/// Marker keeping `Stack` covariant, `Send`, `Sync` and free of its parameters' auto traits.
type StackMarker<P, T, R, C, A> = fn() -> (P, T, R, C, A);

/// The statically specialized stack: provider, threading, progress, CQ format, AV type.
///
/// Defaults: [`ThreadDomain`], [`Manual`], [`CqTagged`](crate::CqTagged), [`Table`](crate::Table).
pub struct Stack<
    P,
    T = ThreadDomain,
    R = Manual,
    C = crate::cq_format::CqTagged,
    A = crate::av_type::Table,
>(PhantomData<StackMarker<P, T, R, C, A>>);

impl<P, T, R, C, A> sealed::Sealed for Stack<P, T, R, C, A> {}

impl<P, T, R, C, A> Config for Stack<P, T, R, C, A>
where
    P: Provider,
    T: Threading,
    R: Progress,
    C: CqFormat,
    A: AvType,
{
    type Provider = P;
    type Threading = T;
    type Progress = R;
    type Cq = C;
    type Av = A;
    type Locks = R::Locks<T>;
}

/// The default stack for provider `P`: single-threaded per domain, manual progress,
/// tagged CQ entries, table AV. The fastest configuration.
pub type DefaultStack<P> = Stack<P>;
/// A thread-safe stack with a progress thread: objects are `Send + Sync`.
pub type SafeStack<P> = Stack<P, ThreadSafe, Auto>;
