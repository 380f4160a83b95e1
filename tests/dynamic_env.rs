//! `Registry::getinfo` honours the `FI_PROVIDER` environment variable. Alone in its test
//! binary (its own process), since it changes the environment.

use fabric::dynamic::{ProviderFilter, Registry, FI_PROVIDER};
use fabric::prelude::*;
use fabric_loopback::Loopback;

type Net = Registry<(Loopback,)>;

fn provs() -> Result<Vec<&'static str>> {
    Net::getinfo(None).map(|v| v.iter().map(|i| i.fabric_attr.prov_name).collect())
}

#[test]
fn getinfo_honours_fi_provider() {
    std::env::remove_var(FI_PROVIDER);
    assert_eq!(ProviderFilter::from_env(), ProviderFilter::All);
    assert_eq!(provs().unwrap(), ["loopback", "loopback"]);
    for (value, listed) in [
        ("loopback", true),
        ("tcp,LoopBack", true),
        ("^tcp", true),
        ("", true),
        ("tcp,udp", false),
        ("^loopback", false),
        ("^udp, loopback", false),
    ] {
        std::env::set_var(FI_PROVIDER, value);
        assert_eq!(ProviderFilter::from_env(), ProviderFilter::parse(value));
        match provs() {
            Ok(p) => assert!(listed && p == ["loopback", "loopback"], "{value:?}: {p:?}"),
            Err(e) => assert!(!listed && e == Error::NoData, "{value:?}: {e}"),
        }
    }
    std::env::remove_var(FI_PROVIDER);
    assert_eq!(provs().unwrap().len(), 2);
}
