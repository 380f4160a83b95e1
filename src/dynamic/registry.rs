//! `fi_getinfo` over a list of providers named as a type, the `FI_PROVIDER` filter, and
//! the choice of the static stack an [`Info`] selects.

use core::marker::PhantomData;

use crate::attr::{AvKind, EpType, ProgressMode, ThreadingLevel};
use crate::av_type::{Map, Table};
use crate::config::{Auto, Config, Manual, Stack, ThreadDomain, ThreadSafe};
use crate::cq_format::CqTagged;
use crate::domain::Fabric;
use crate::error::{Error, Result};
use crate::info::{self, Hints, Info};
use crate::provider::Provider;

use super::choice::{thread_impl, Choice};
use super::objects::DynFabric;

/// The environment variable naming the providers `getinfo` may return (libfabric's
/// `FI_PROVIDER`).
pub const FI_PROVIDER: &str = "FI_PROVIDER";

/// The provider selection of `FI_PROVIDER`: a comma-separated list of names to include,
/// or, prefixed with `^`, to exclude. Names compare ASCII case-insensitively; blanks
/// around names and empty names are ignored.
///
/// ```
/// use fabric::dynamic::ProviderFilter;
/// let f = ProviderFilter::parse("^tcp, udp");
/// assert!(f.allows("loopback") && !f.allows("TCP") && !f.allows("udp"));
/// assert!(ProviderFilter::parse("").allows("anything"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ProviderFilter {
    /// No restriction (variable unset or empty).
    #[default]
    All,
    /// Only these providers.
    Include(Vec<String>),
    /// Every provider but these.
    Exclude(Vec<String>),
}

impl ProviderFilter {
    /// Parses the value of `FI_PROVIDER`. Pure: see [`ProviderFilter::from_env`].
    pub fn parse(value: &str) -> Self {
        let value = value.trim();
        let (exclude, list) = match value.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, value),
        };
        let names: Vec<String> = list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        match (exclude, names.is_empty()) {
            (_, true) => ProviderFilter::All,
            (true, false) => ProviderFilter::Exclude(names),
            (false, false) => ProviderFilter::Include(names),
        }
    }

    /// The filter the process environment sets (`All` when `FI_PROVIDER` is unset or not
    /// Unicode).
    pub fn from_env() -> Self {
        std::env::var(FI_PROVIDER)
            .map(|v| Self::parse(&v))
            .unwrap_or_default()
    }

    /// Whether provider `name` may be used.
    pub fn allows(&self, name: &str) -> bool {
        let listed = |names: &[String]| names.iter().any(|n| n.eq_ignore_ascii_case(name));
        match self {
            ProviderFilter::All => true,
            ProviderFilter::Include(names) => listed(names),
            ProviderFilter::Exclude(names) => !listed(names),
        }
    }
}

/// A list of providers, implemented for tuples of 1 to 4 [`Provider`]s, best first.
pub trait ProviderList: 'static {
    /// Number of providers.
    const LEN: usize;
    /// The name of provider `index`.
    fn name(index: usize) -> Option<&'static str>;
    /// The candidates of provider `index` (`Provider::candidates`).
    fn candidates(index: usize) -> Vec<Info>;
    /// Opens a fabric of provider `index` on the stack `choice` selects.
    fn open_fabric(index: usize, choice: Choice, info: &Info) -> Result<DynFabric>;
}

fn open_stack<S: Config>(choice: Choice, info: &Info) -> Result<DynFabric> {
    Ok(DynFabric::new(Box::new(Fabric::<S>::open(info)?), choice))
}

/// Opens a fabric of provider `P` on one of its 8 stacks.
fn open_provider<P: Provider>(choice: Choice, info: &Info) -> Result<DynFabric> {
    let safe = choice.threading == ThreadingLevel::Safe;
    let auto = choice.progress == ProgressMode::Auto;
    let map = choice.av_type == AvKind::Map;
    match (safe, auto, map) {
        (false, false, false) => {
            open_stack::<Stack<P, ThreadDomain, Manual, CqTagged, Table>>(choice, info)
        }
        (false, false, true) => {
            open_stack::<Stack<P, ThreadDomain, Manual, CqTagged, Map>>(choice, info)
        }
        (false, true, false) => {
            open_stack::<Stack<P, ThreadDomain, Auto, CqTagged, Table>>(choice, info)
        }
        (false, true, true) => {
            open_stack::<Stack<P, ThreadDomain, Auto, CqTagged, Map>>(choice, info)
        }
        (true, false, false) => {
            open_stack::<Stack<P, ThreadSafe, Manual, CqTagged, Table>>(choice, info)
        }
        (true, false, true) => {
            open_stack::<Stack<P, ThreadSafe, Manual, CqTagged, Map>>(choice, info)
        }
        (true, true, false) => {
            open_stack::<Stack<P, ThreadSafe, Auto, CqTagged, Table>>(choice, info)
        }
        (true, true, true) => open_stack::<Stack<P, ThreadSafe, Auto, CqTagged, Map>>(choice, info),
    }
}

macro_rules! provider_tuple {
    ($len:expr; $($P:ident $i:tt),+) => {
        impl<$($P: Provider),+> ProviderList for ($($P,)+) {
            const LEN: usize = $len;
            fn name(index: usize) -> Option<&'static str> {
                match index {
                    $($i => Some($P::NAME),)+
                    _ => None,
                }
            }
            fn candidates(index: usize) -> Vec<Info> {
                match index {
                    $($i => $P::candidates(),)+
                    _ => Vec::new(),
                }
            }
            fn open_fabric(index: usize, choice: Choice, info: &Info) -> Result<DynFabric> {
                match index {
                    $($i => open_provider::<$P>(choice, info),)+
                    _ => Err(Error::NoDev),
                }
            }
        }
    };
}

provider_tuple!(1; P0 0);
provider_tuple!(2; P0 0, P1 1);
provider_tuple!(3; P0 0, P1 1, P2 2);
provider_tuple!(4; P0 0, P1 1, P2 2, P3 3);

/// The run-time entry point: `fi_getinfo` and `fi_fabric` over the providers of list `L`
/// (a tuple such as `(Shm, Tcp, Udp, Loopback)`, best first).
///
/// ```
/// use fabric::dynamic::{prelude::*, Registry};
/// use fabric::prelude::*;
/// use fabric_loopback::Loopback;
///
/// type Net = Registry<(Loopback,)>;
/// let hints = Hints::new().caps(Caps::TAGGED).ep_type(EpType::Rdm);
/// let info = Net::getinfo(Some(&hints)).unwrap().remove(0);
/// let fabric = Net::fabric(&info).unwrap();
/// let domain = fabric.domain(&info).unwrap();
/// let cq = domain.cq(&CqAttr { format: CqFormatKind::Msg, ..CqAttr::DEFAULT }).unwrap();
/// let av = domain.av(&AvAttr::DEFAULT).unwrap();
/// let ep = domain.endpoint(&info).unwrap();
/// ep.bind_cq(&cq, BindFlags::TRANSMIT | BindFlags::RECV).unwrap();
/// ep.bind_av(&av).unwrap();
/// ep.enable().unwrap();
/// let me = av.insert(&ep.name()).unwrap();
/// let mut buf = [0u8; 5];
/// // SAFETY: `buf` outlives the receive, which completes below before it is read.
/// unsafe { ep.trecv(&mut buf, FiAddr::UNSPEC, 7, 0, Context(1)).unwrap() };
/// ep.tinject(b"hello", me, 7).unwrap();
/// let mut entries = [CqMsgEntry::default(); 4]; // the CQ's format, checked at run time
/// let n = loop {
///     match cq.read(&mut entries[..]) {
///         Ok(n) => break n,
///         Err(Error::Again) => continue,
///         Err(e) => panic!("{e}"),
///     }
/// };
/// assert_eq!((n, entries[0].len, &buf), (1, 5, b"hello"));
/// ```
pub struct Registry<L>(PhantomData<fn() -> L>);

impl<L: ProviderList> Registry<L> {
    /// The providers' names, in list order.
    pub fn providers() -> Vec<&'static str> {
        (0..L::LEN).filter_map(L::name).collect()
    }

    /// `fi_getinfo`: the entries of every provider `FI_PROVIDER` allows that match
    /// `hints`, best first (list order, then each provider's candidates in order).
    /// `Err(NoData)` when nothing matches. See [`Registry::getinfo_filtered`].
    pub fn getinfo(hints: Option<&Hints>) -> Result<Vec<Info>> {
        Self::getinfo_filtered(hints, &ProviderFilter::from_env())
    }

    /// `fi_getinfo` with an explicit provider filter instead of `FI_PROVIDER`.
    ///
    /// The threading level, progress model and AV type are those the hints ask for;
    /// unspecified ones default to `FI_THREAD_DOMAIN`, `FI_PROGRESS_MANUAL` and
    /// `FI_AV_TABLE` (the fastest stack). `FI_THREAD_COMPLETION` and
    /// `FI_THREAD_ENDPOINT` are granted as asked and served by the thread-safe stack.
    /// The entries are what [`Registry::fabric`] opens (see [`Choice`]). MSG
    /// endpoints are not offered: this layer has no connection management calls
    /// (opening one answers `NotSupported`); use a static stack for them.
    pub fn getinfo_filtered(hints: Option<&Hints>, filter: &ProviderFilter) -> Result<Vec<Info>> {
        let h = hints.map(|h| &h.info.domain_attr);
        let threading = thread_impl(h.map_or(ThreadingLevel::Unspec, |d| d.threading));
        let progress = match h {
            Some(d)
                if d.data_progress == ProgressMode::Auto
                    || d.control_progress == ProgressMode::Auto =>
            {
                ProgressMode::Auto
            }
            _ => ProgressMode::Manual,
        };
        let av_type = match h {
            Some(d) if d.av_type == AvKind::Map => AvKind::Map,
            _ => AvKind::Table,
        };
        let mut out = Vec::new();
        for i in 0..L::LEN {
            match L::name(i) {
                Some(name) if filter.allows(name) => {}
                _ => continue,
            }
            let cands: Vec<Info> = L::candidates(i)
                .into_iter()
                // No connection management at run time: MSG endpoints are left to the
                // static stacks.
                .filter(|c| c.ep_attr.ep_type != EpType::Msg)
                .map(|mut c| {
                    c.domain_attr.threading = threading;
                    c.domain_attr.data_progress = progress;
                    c.domain_attr.control_progress = progress;
                    c.domain_attr.av_type = av_type;
                    c
                })
                .collect();
            if let Ok(v) = info::filter(&cands, hints) {
                out.extend(v);
            }
        }
        if out.is_empty() {
            Err(Error::NoData)
        } else {
            Ok(out)
        }
    }

    /// `fi_fabric`: opens the fabric an entry of [`Registry::getinfo`] describes, on the
    /// stack [`Choice::from_info`] selects. An empty provider name picks the first
    /// provider; an unknown one fails with `Err(NoDev)`.
    pub fn fabric(info: &Info) -> Result<DynFabric> {
        let name = info.fabric_attr.prov_name;
        let index = if name.is_empty() {
            0
        } else {
            (0..L::LEN)
                .find(|&i| L::name(i).is_some_and(|n| n.eq_ignore_ascii_case(name)))
                .ok_or(Error::NoDev)?
        };
        let mut choice = Choice::from_info(info);
        choice.provider = L::name(index).ok_or(Error::NoDev)?;
        L::open_fabric(index, choice, info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_include_and_exclude_lists() {
        assert_eq!(ProviderFilter::parse(""), ProviderFilter::All);
        assert_eq!(ProviderFilter::parse("  "), ProviderFilter::All);
        assert_eq!(ProviderFilter::parse("^"), ProviderFilter::All);
        assert_eq!(ProviderFilter::parse(",,"), ProviderFilter::All);
        assert_eq!(
            ProviderFilter::parse("tcp"),
            ProviderFilter::Include(vec!["tcp".into()])
        );
        assert_eq!(
            ProviderFilter::parse(" shm , tcp,"),
            ProviderFilter::Include(vec!["shm".into(), "tcp".into()])
        );
        assert_eq!(
            ProviderFilter::parse("^udp,loopback"),
            ProviderFilter::Exclude(vec!["udp".into(), "loopback".into()])
        );
    }

    #[test]
    fn filter_allows() {
        let inc = ProviderFilter::parse("shm,TCP");
        assert!(inc.allows("shm") && inc.allows("tcp") && inc.allows("Tcp"));
        assert!(!inc.allows("udp") && !inc.allows("sh"));
        let exc = ProviderFilter::parse("^shm,tcp");
        assert!(!exc.allows("SHM") && !exc.allows("tcp"));
        assert!(exc.allows("udp") && exc.allows("loopback"));
        assert!(ProviderFilter::All.allows(""));
        // A `^` inside the list is a name character, not an exclusion.
        assert!(ProviderFilter::parse("tcp,^udp").allows("^udp"));
    }

    #[test]
    fn choice_maps_levels_onto_stacks() {
        let mut info = Info::default();
        info.fabric_attr.prov_name = "p";
        let c = Choice::from_info(&info);
        assert_eq!(
            (c.provider, c.threading, c.progress, c.av_type),
            (
                "p",
                ThreadingLevel::Domain,
                ProgressMode::Manual,
                AvKind::Table
            )
        );
        for (level, want) in [
            (ThreadingLevel::Domain, ThreadingLevel::Domain),
            (ThreadingLevel::Completion, ThreadingLevel::Safe),
            (ThreadingLevel::Endpoint, ThreadingLevel::Safe),
            (ThreadingLevel::Safe, ThreadingLevel::Safe),
        ] {
            info.domain_attr.threading = level;
            assert_eq!(Choice::from_info(&info).threading, want, "{level:?}");
        }
        info.domain_attr.control_progress = ProgressMode::Auto;
        assert_eq!(Choice::from_info(&info).progress, ProgressMode::Auto);
        info.domain_attr.control_progress = ProgressMode::Manual;
        info.domain_attr.data_progress = ProgressMode::Auto;
        assert_eq!(Choice::from_info(&info).progress, ProgressMode::Auto);
        info.domain_attr.av_type = AvKind::Map;
        assert_eq!(Choice::from_info(&info).av_type, AvKind::Map);
    }
}
