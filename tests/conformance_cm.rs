//! Connection management (`fi_cm`, `fi_eq`, `fi_endpoint`) and the data path of
//! connected MSG endpoints on the loopback provider: the provider-independent suite of
//! `suite/cm.rs` for a matrix of static stacks, plus the refusals of MSG by the layers
//! and providers that have no connection management (the run-time layer, shm).

/// The provider under test.
type Prov = fabric_loopback::Loopback;

include!("suite/cm.rs");

/// The run-time layer offers no MSG endpoint: it has no connection management calls.
#[test]
fn dynamic_and_shm_refuse_msg() {
    use fabric::dynamic::Registry;
    let infos = Registry::<(Prov,)>::getinfo(None).unwrap();
    assert!(infos.iter().all(|i| i.ep_attr.ep_type != EpType::Msg));
    let hints = Hints::new().ep_type(EpType::Msg);
    assert_eq!(
        Registry::<(Prov,)>::getinfo(Some(&hints)).err(),
        Some(Error::NoData)
    );
}

/// The shm provider has no connection management: no MSG info, and an MSG info made
/// by hand opens neither an endpoint nor a passive endpoint.
#[test]
fn shm_refuses_msg() {
    type S = fabric::Stack<fabric_shm::Shm>;
    let hints = Hints::new().ep_type(EpType::Msg);
    assert_eq!(getinfo::<S>(Some(&hints)).err(), Some(Error::NoData));
    let mut info = getinfo::<S>(None).unwrap().remove(0);
    info.ep_attr.ep_type = EpType::Msg;
    let h = host::<S>(&info);
    assert_eq!(h.fabric.passive_ep(&info).err(), Some(Error::NotSupported));
    assert_eq!(h.domain.endpoint(&info).err(), Some(Error::NotSupported));
}
