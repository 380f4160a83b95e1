//! The TCP fallback between real processes: a 16-rank exchange, ranks that die or hang
//! before the fence, and the errors for a missing or misconfigured launcher.

mod common;

use std::time::{Duration, Instant};

use common::{bare, check_lines, spawn_fallback, wait_until};

#[test]
fn sixteen_ranks_exchange_and_verify() {
    let size = 16;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut all = String::new();
    for (r, child) in spawn_fallback(size, "60", &[]).into_iter().enumerate() {
        let out = wait_until(child, deadline).unwrap_or_else(|| panic!("rank {r} hung"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "rank {r}: {:?} {stderr}", out.status);
        all.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    check_lines(&all, size, "TCP fallback");
    // Every rank is on this machine: local ranks are the ranks.
    for r in 0..size {
        assert!(
            all.contains(&format!("rank {r} of {size} (local {r}/{size})")),
            "{all}"
        );
    }
}

/// Runs a job where rank `bad` misbehaves; returns each other rank's stderr, checking
/// that each failed (exit code 2) before `limit`. The bad rank is killed afterwards if
/// it is still there (a hung rank).
fn others_fail(
    size: u32,
    bad: u32,
    timeout_s: &str,
    args: &[&str],
    limit: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut kids = spawn_fallback(size, timeout_s, args);
    let bad_child = kids.remove(bad as usize);
    let mut errs = Vec::new();
    for (i, child) in kids.into_iter().enumerate() {
        let r = if (i as u32) < bad {
            i as u32
        } else {
            i as u32 + 1
        };
        let out = wait_until(child, deadline)
            .unwrap_or_else(|| panic!("rank {r} still running after {limit:?}: a hang"));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "rank {r}: {stderr}");
        errs.push(stderr);
    }
    let _ = wait_until(bad_child, Instant::now());
    errs
}

#[test]
fn a_rank_dying_before_the_fence_fails_the_others_at_once() {
    // The timeout is long: a closed connection must be noticed without waiting for it.
    let errs = others_fail(
        6,
        3,
        "60",
        &["--die-before-fence", "3"],
        Duration::from_secs(30),
    );
    for e in errs {
        assert!(
            e.contains("fence: rank(s) 3 closed their connection"),
            "unclear error: {e}"
        );
    }
}

#[test]
fn rank_zero_dying_before_the_fence_fails_the_others() {
    let errs = others_fail(
        4,
        0,
        "60",
        &["--die-before-fence", "0"],
        Duration::from_secs(30),
    );
    for e in errs {
        assert!(
            e.contains("rank(s) 0 closed their connection"),
            "unclear error: {e}"
        );
    }
}

#[test]
fn a_hung_rank_is_named_when_the_timeout_expires() {
    let errs = others_fail(
        5,
        2,
        "3",
        &["--hang-before-fence", "2"],
        Duration::from_secs(30),
    );
    for e in errs {
        assert!(
            e.contains("fence timed out after 3.0 s waiting for rank(s) 2"),
            "unclear error: {e}"
        );
    }
}

#[test]
fn a_hung_rank_zero_is_named_by_the_others() {
    // The clients wait for rank 0's verdict a little longer than the timeout, then name
    // rank 0 itself.
    let errs = others_fail(
        3,
        0,
        "3",
        &["--hang-before-fence", "0"],
        Duration::from_secs(30),
    );
    for e in errs {
        assert!(e.contains("waiting for rank(s) 0"), "unclear error: {e}");
    }
}

#[test]
fn a_rank_that_never_starts_is_named_at_init() {
    // Ranks 0..3 of a job of 4: rank 3 never comes.
    let addr = common::free_addr();
    let deadline = Instant::now() + Duration::from_secs(30);
    let kids: Vec<_> = (0..3)
        .map(|r| {
            bare(&[])
                .env("FABRIC_BOOT_ADDR", &addr)
                .env("FABRIC_BOOT_RANK", r.to_string())
                .env("FABRIC_BOOT_SIZE", "4")
                .env("FABRIC_BOOT_TIMEOUT", "4")
                .spawn()
                .unwrap()
        })
        .collect();
    for (r, k) in kids.into_iter().enumerate() {
        let out = wait_until(k, deadline).unwrap_or_else(|| panic!("rank {r} hung"));
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "rank {r}: {e}");
        assert!(
            e.contains("waiting for rank(s) 3"),
            "rank {r}: unclear error: {e}"
        );
    }
}

#[test]
fn no_launcher_says_what_was_looked_for() {
    let out = wait_until(
        bare(&[]).spawn().unwrap(),
        Instant::now() + Duration::from_secs(30),
    )
    .expect("no hang");
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("no launcher found"), "{e}");
    for var in [
        "PMIX_RANK",
        "PMIX_NAMESPACE",
        "PMIX_SERVER_URI",
        "PMI_FD",
        "FABRIC_BOOT_ADDR",
    ] {
        assert!(e.contains(var), "{var} not named in: {e}");
    }
}

#[test]
fn misconfigured_launchers_say_what_is_wrong() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[
                ("FABRIC_BOOT_ADDR", "127.0.0.1:1"),
                ("FABRIC_BOOT_RANK", "x"),
                ("FABRIC_BOOT_SIZE", "2"),
            ],
            "FABRIC_BOOT_RANK: \"x\" is not a non-negative 32-bit integer",
        ),
        (
            &[
                ("FABRIC_BOOT_ADDR", "127.0.0.1:1"),
                ("FABRIC_BOOT_RANK", "2"),
                ("FABRIC_BOOT_SIZE", "2"),
            ],
            "rank 2 in a job of size 2",
        ),
        (
            &[
                ("FABRIC_BOOT_ADDR", "127.0.0.1:1"),
                ("FABRIC_BOOT_RANK", "0"),
                ("FABRIC_BOOT_SIZE", "2"),
                ("FABRIC_BOOT_TIMEOUT", "-1"),
            ],
            "FABRIC_BOOT_TIMEOUT",
        ),
        (
            &[("PMI_FD", "999"), ("PMI_RANK", "0"), ("PMI_SIZE", "1")],
            "PMI_FD: descriptor 999 is not open",
        ),
        (
            &[("PMI_FD", "1"), ("PMI_RANK", "0"), ("PMI_SIZE", "1")],
            "PMI_FD: descriptor 1 is not a socket",
        ),
        (
            &[("FABRIC_BOOT_KIND", "slurm")],
            "FABRIC_BOOT_KIND: \"slurm\" is none of",
        ),
        // PMIx variables without a server to reach: PMIx_Init's own error (or, where
        // libpmix is absent, the loader's).
        (&[("PMIX_NAMESPACE", "nobody"), ("PMIX_RANK", "0")], "PMIx"),
        // Two launchers detected, neither usable: both failures are reported.
        (
            &[
                ("PMIX_NAMESPACE", "nobody"),
                ("PMIX_RANK", "0"),
                ("PMI_FD", "999"),
                ("PMI_RANK", "0"),
                ("PMI_SIZE", "1"),
            ],
            "no launcher could be used: [PMIx: ",
        ),
    ];
    for (env, expect) in cases {
        let mut c = bare(&[]);
        for (k, v) in *env {
            c.env(k, v);
        }
        let out = wait_until(c.spawn().unwrap(), Instant::now() + Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{env:?}: hung"));
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {e}");
        assert!(e.contains(expect), "{env:?}: expected {expect:?} in: {e}");
    }
}

#[test]
fn an_unusable_launcher_falls_through_to_the_next_found() {
    // PMIx variables with no PMIx server behind them, and a usable fallback.
    let out = wait_until(
        bare(&[])
            .env("PMIX_NAMESPACE", "nobody")
            .env("PMIX_RANK", "0")
            .env("FABRIC_BOOT_ADDR", common::free_addr())
            .env("FABRIC_BOOT_RANK", "0")
            .env("FABRIC_BOOT_SIZE", "1")
            .spawn()
            .unwrap(),
        Instant::now() + Duration::from_secs(60),
    )
    .expect("no hang");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    check_lines(&String::from_utf8_lossy(&out.stdout), 1, "TCP fallback");
}
