//! Which static stack a dyn object runs on, as an [`Info`] selects it.

use crate::attr::{AvKind, ProgressMode, ThreadingLevel};
use crate::info::Info;
#[cfg(doc)]
use crate::{Auto, Manual, Map, Table, ThreadDomain, ThreadSafe};

/// The static stack behind a dyn object: which provider of the list, and the threading,
/// progress and AV-type parameters. The CQ format is always `CqTagged` inside; each dyn
/// CQ converts to its own format.
///
/// Derived from an [`Info`] by [`Choice::from_info`]:
///
/// | info field | stack parameter |
/// |---|---|
/// | `domain_attr.threading`: `Domain` or `Unspec` | [`ThreadDomain`] |
/// | `domain_attr.threading`: `Completion`, `Endpoint` or `Safe` | [`ThreadSafe`] (it satisfies the weaker promises) |
/// | `data_progress` or `control_progress` is `Auto` | [`Auto`] |
/// | otherwise | [`Manual`] |
/// | `domain_attr.av_type`: `Map` | [`Map`] |
/// | otherwise | [`Table`] |
///
/// So a provider has 8 monomorphized stacks, whatever the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The provider's name.
    pub provider: &'static str,
    /// `Domain` or `Safe`: the threading implementation.
    pub threading: ThreadingLevel,
    /// `Manual` or `Auto`.
    pub progress: ProgressMode,
    /// `Map` or `Table`.
    pub av_type: AvKind,
}

impl Choice {
    /// The stack parameters `info` selects (the provider name is taken as is).
    pub fn from_info(info: &Info) -> Self {
        let d = &info.domain_attr;
        Choice {
            provider: info.fabric_attr.prov_name,
            threading: thread_impl(d.threading),
            progress: if d.data_progress == ProgressMode::Auto
                || d.control_progress == ProgressMode::Auto
            {
                ProgressMode::Auto
            } else {
                ProgressMode::Manual
            },
            av_type: if d.av_type == AvKind::Map {
                AvKind::Map
            } else {
                AvKind::Table
            },
        }
    }
}

/// The threading implementation serving a requested level.
pub(crate) fn thread_impl(level: ThreadingLevel) -> ThreadingLevel {
    match level {
        ThreadingLevel::Domain | ThreadingLevel::Unspec => ThreadingLevel::Domain,
        _ => ThreadingLevel::Safe,
    }
}
