//! The rules `Boot` enforces whatever the launcher, on a one-rank fallback job in this
//! process. One test in its own binary: it sets environment variables, which must not
//! race with other tests' threads.

use fabric_boot::{Boot, BootError, Kind, MAX_KEY_LEN, MAX_VALUE_LEN};

#[test]
fn rules_of_put_commit_fence_get() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    std::env::set_var("FABRIC_BOOT_ADDR", &addr);
    std::env::set_var("FABRIC_BOOT_RANK", "0");
    std::env::set_var("FABRIC_BOOT_SIZE", "1");
    std::env::set_var("FABRIC_BOOT_TIMEOUT", "20");

    let mut b = Boot::with(Kind::Tcp).unwrap();
    assert_eq!((b.kind(), b.rank(), b.size()), (Kind::Tcp, 0, 1));
    assert_eq!((b.local_rank(), b.local_size()), (Some(0), Some(1)));

    // Argument checks.
    let invalid = |r: Result<_, BootError>| matches!(r, Err(BootError::Invalid(_)));
    assert!(invalid(b.put("", b"x")));
    assert!(invalid(b.put("has space", b"x")));
    assert!(invalid(b.put(&"k".repeat(MAX_KEY_LEN + 1), b"x")));
    assert!(invalid(b.put("big", &vec![0; MAX_VALUE_LEN + 1])));
    assert!(matches!(b.get(1, "k"), Err(BootError::Invalid(_))));

    // A later put of a staged key replaces it; values appear only after the fence.
    b.put("k", b"first").unwrap();
    b.put("k", b"second").unwrap();
    b.put("max", &vec![7; MAX_VALUE_LEN]).unwrap();
    b.commit().unwrap();
    assert!(matches!(
        b.get(0, "k"),
        Err(BootError::NotFound { rank: 0, .. })
    ));
    b.fence().unwrap();
    assert_eq!(b.get(0, "k").unwrap(), b"second");
    assert_eq!(b.get(0, "max").unwrap(), vec![7; MAX_VALUE_LEN]);

    // Put but not committed: not exchanged by the fence.
    b.put("late", b"x").unwrap();
    b.fence().unwrap();
    assert!(matches!(b.get(0, "late"), Err(BootError::NotFound { .. })));

    // A key is committed once.
    b.put("k", b"third").unwrap();
    let e = b.commit().unwrap_err();
    assert!(e.to_string().contains("already committed"), "{e}");

    b.barrier().unwrap();
    b.finalize().unwrap();
}
