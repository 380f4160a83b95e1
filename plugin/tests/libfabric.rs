//! The plugin under real libfabric programs: a C test of the API and its misuse
//! (`tests/plugin_c/api.c`, compiled with `cc` against `-lfabric`), `fi_info` and
//! `fi_pingpong` between two processes, Open MPI. Each loads `libfab_shm-fi.so`,
//! `libfab_tcp-fi.so` and `libfab_hybrid-fi.so` (the same library under three names)
//! through `FI_PROVIDER_PATH`. Needs `libfabric-dev` and `libfabric-bin` (CI installs them).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{build, mpi_prog, mtl_ofi, provider_dir, ranks_on, run, text, wait_deadline};

fn with_plugin(cmd: &mut Command) -> &mut Command {
    cmd.env("FI_PROVIDER_PATH", provider_dir())
        .env_remove("FI_PROVIDER")
}

/// Compiles `tests/plugin_c/<name>.c` against libfabric and runs it over fab_shm;
/// returns its output after asserting it succeeded.
fn run_c(name: &str) -> String {
    run_c_on(name, "fab_shm")
}

/// Compiles `tests/plugin_c/<name>.c` against libfabric and runs it over provider
/// `prov` (`FAB_PROV`); returns its output after asserting it succeeded.
fn run_c_on(name: &str, prov: &str) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/plugin_c/{name}.c"));
    let bin = build(
        Command::new("cc")
            .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1"])
            .arg(&src)
            .arg("-lfabric"),
        &format!("{name}-{prov}"),
    );
    let out = run(
        with_plugin(Command::new(&bin).env("FAB_PROV", prov)),
        Duration::from_secs(120),
        name,
    );
    let t = text(&out);
    println!("{t}");
    assert!(out.status.success(), "{name} failed:\n{t}");
    t
}

#[test]
fn c_api_suite() {
    let t = run_c("api");
    for part in [
        "ok getinfo",
        "ok messages (stack 0)",
        "ok messages (stack 1)",
        "ok format 1 (stack 0)",
        "ok format 4 (stack 1)",
        "ok misuse",
        "ok counters and waits",
        "ok wait and poll sets (stack 0)",
        "ok wait and poll sets (stack 1)",
        "ok eq",
        "checks passed",
    ] {
        assert!(t.contains(part), "missing {part:?} in:\n{t}");
    }
}

#[test]
fn c_two_processes_rma_atomics_messages() {
    let t = run_c("xproc");
    assert!(t.contains("ok two processes"), "{t}");
}

/// The whole C suite (getinfo, both stacks, four CQ formats, misuse, counters, wait and
/// poll sets, EQ) on fab_tcp.
#[test]
fn c_api_suite_tcp() {
    let t = run_c_on("api", "fab_tcp");
    for part in [
        "provider fab_tcp",
        "ok getinfo",
        "ok messages (stack 0)",
        "ok messages (stack 1)",
        "ok format 1 (stack 0)",
        "ok format 4 (stack 1)",
        "ok misuse",
        "ok counters and waits",
        "ok wait and poll sets (stack 0)",
        "ok wait and poll sets (stack 1)",
        "ok eq",
        "checks passed",
    ] {
        assert!(t.contains(part), "missing {part:?} in:\n{t}");
    }
}

/// Passive endpoint, reject with data (readerr), accept with data, a message,
/// getpeer and shutdown on fab_tcp, each CM event naming its object.
#[test]
fn c_connection_management_tcp() {
    let t = run_c_on("cm", "fab_tcp");
    for part in [
        "ok reject",
        "ok accept",
        "ok message",
        "ok shutdown",
        "checks passed",
    ] {
        assert!(t.contains(part), "missing {part:?} in:\n{t}");
    }
}

/// The vector calls (msg and tagged sendv/recvv and msg forms, RMA, atomics, at
/// iov_limit entries) and their completions make no allocator call on the calling
/// thread once warmed up, on each provider: `tests/plugin_c/noalloc.c` counts them.
#[test]
fn c_vector_calls_allocate_nothing() {
    for prov in ["fab_shm", "fab_tcp", "fab_hybrid"] {
        let t = run_c_on("noalloc", prov);
        assert!(t.contains("ok no allocation"), "{t}");
        // Every operation was measured, and none allocated.
        let rows: Vec<&str> = t.lines().filter(|l| l.contains(" per round ")).collect();
        assert_eq!(rows.len(), 9, "{t}");
        assert!(rows.iter().all(|l| l.contains(" 0 allocations, ")), "{t}");
    }
}

#[test]
fn c_two_processes_tcp() {
    let t = run_c_on("xproc", "fab_tcp");
    assert!(t.contains("ok two processes"), "{t}");
}

#[test]
fn fi_info_lists_the_provider() {
    let out = run(
        with_plugin(Command::new("fi_info").args(["-p", "fab_shm"])),
        Duration::from_secs(60),
        "fi_info",
    );
    let t = text(&out);
    assert!(out.status.success(), "fi_info failed:\n{t}");
    assert!(t.contains("provider: fab_shm\n"), "{t}");
    assert!(t.contains("type: FI_EP_RDM"), "{t}");

    let out = run(
        with_plugin(Command::new("fi_info").args(["-p", "fab_shm", "-v", "-t", "FI_EP_RDM"])),
        Duration::from_secs(60),
        "fi_info -v",
    );
    let t = text(&out);
    assert!(out.status.success(), "fi_info -v failed:\n{t}");
    for want in [
        "prov_name: fab_shm",
        "name: fab_shm",
        "threading: FI_THREAD_DOMAIN",
        "av_type: FI_AV_TABLE",
        "mr_mode: [  ]",
        "FI_MSG",
        "FI_TAGGED",
        "FI_RMA",
        "FI_REMOTE_WRITE",
        "FI_ATOMIC",
        "FI_LOCAL_COMM",
        "api_version: 1.17",
    ] {
        assert!(t.contains(want), "missing {want:?} in:\n{t}");
    }
    // Only what the plugin implements is claimed.
    for absent in ["FI_TRIGGER", "FI_RMA_EVENT", "FI_REMOTE_COMM", "FI_EP_MSG"] {
        assert!(!t.contains(absent), "{absent} claimed:\n{t}");
    }
}

/// Whether something listens on TCP `port` (from /proc, without connecting: the
/// server accepts one control connection only).
fn listening(port: u16) -> bool {
    let hex = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|s| {
            s.lines().any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&hex) && cols[3] == "0A"
            })
        })
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `fi_pingpong` server and client over the plugin's RDM endpoints; both outputs.
fn pingpong(args: &[&str]) -> (String, String) {
    pingpong_ep("rdm", args)
}

/// `fi_pingpong` server and client over fab_shm on endpoint type `ep`.
fn pingpong_ep(ep: &str, args: &[&str]) -> (String, String) {
    pingpong_on("fab_shm", ep, args)
}

/// `fi_pingpong` server and client over provider `prov` on endpoint type `ep`;
/// returns both outputs.
fn pingpong_on(prov: &str, ep: &str, args: &[&str]) -> (String, String) {
    let port = free_port().to_string();
    let server = with_plugin(Command::new("fi_pingpong").args(["-p", prov, "-e", ep]))
        .args(args)
        .args(["-B", &port])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fi_pingpong server");
    let end = Instant::now() + Duration::from_secs(30);
    while !listening(port.parse().unwrap()) {
        assert!(Instant::now() < end, "fi_pingpong server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = run(
        with_plugin(Command::new("fi_pingpong").args(["-p", prov, "-e", ep]))
            .args(args)
            .args(["-P", &port, "127.0.0.1"]),
        Duration::from_secs(300),
        "fi_pingpong client",
    );
    let server = wait_deadline(server, Duration::from_secs(60), "fi_pingpong server");
    let (s, c) = (text(&server), text(&client));
    assert!(server.status.success(), "server failed:\n{s}\nclient:\n{c}");
    assert!(client.status.success(), "client failed:\n{c}\nserver:\n{s}");
    (s, c)
}

/// A count as fi_pingpong prints it: `64`, `1.5k`, `8m`.
fn count(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' => (&s[..s.len() - 1], 1 << 20),
        b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let v: f64 = num.parse().ok()?;
    Some((v * mult as f64).round() as u64)
}

/// The result rows (`bytes #sent #ack ...`) of fi_pingpong's output: size and count.
fn rows(out: &str) -> Vec<(u64, u64)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let size = count(f.first()?)?;
            let sent = count(f.get(1)?)?;
            // "#ack" is printed as "=<n>": every message was answered.
            let acked = count(f.get(2)?.strip_prefix('=')?)?;
            (acked == sent).then_some((size, sent))
        })
        .collect()
}

#[test]
fn fi_pingpong_all_sizes_with_data_checks() {
    let (s, c) = pingpong(&["-I", "10", "-S", "all", "-c"]);
    for out in [&s, &c] {
        let r = rows(out);
        // fi_pingpong's "all" sizes run from 0 bytes up to several MiB.
        assert!(r.len() >= 20, "too few sizes:\n{out}");
        assert!(r.iter().any(|&(size, _)| size == 1), "{out}");
        assert!(r.iter().all(|&(_, n)| n == 10), "{out}");
        assert!(r.iter().any(|&(size, _)| size >= 1 << 20), "{out}");
    }
}

#[test]
fn fi_pingpong_tagged_small() {
    let (s, c) = pingpong(&["-I", "200", "-S", "64", "-m", "tagged", "-c"]);
    for out in [&s, &c] {
        assert_eq!(rows(out), vec![(64, 200)], "{out}");
    }
}

#[test]
fn fi_pingpong_dgram() {
    let (s, c) = pingpong_ep("dgram", &["-I", "200", "-S", "64", "-c"]);
    for out in [&s, &c] {
        assert_eq!(rows(out), vec![(64, 200)], "{out}");
    }
}

#[test]
fn fi_info_lists_fab_tcp() {
    let out = run(
        with_plugin(Command::new("fi_info").args(["-p", "fab_tcp", "-v", "-t", "FI_EP_RDM"])),
        Duration::from_secs(60),
        "fi_info -v -p fab_tcp",
    );
    let t = text(&out);
    assert!(out.status.success(), "fi_info failed:\n{t}");
    for want in [
        "prov_name: fab_tcp",
        "type: FI_EP_RDM",
        "FI_TAGGED",
        "FI_LOCAL_COMM",
        "FI_REMOTE_COMM",
        "FI_DIRECTED_RECV",
        "addr_format: FI_SOCKADDR_IN",
    ] {
        assert!(t.contains(want), "missing {want:?} in:\n{t}");
    }
    for absent in ["FI_TRIGGER", "FI_RMA_EVENT"] {
        assert!(!t.contains(absent), "{absent} claimed:\n{t}");
    }
}

#[test]
fn fi_pingpong_tcp_all_sizes_with_data_checks() {
    let (s, c) = pingpong_on("fab_tcp", "rdm", &["-I", "10", "-S", "all", "-c"]);
    for out in [&s, &c] {
        let r = rows(out);
        assert!(r.len() >= 20, "too few sizes:\n{out}");
        assert!(r.iter().any(|&(size, _)| size == 1), "{out}");
        assert!(r.iter().all(|&(_, n)| n == 10), "{out}");
        assert!(r.iter().any(|&(size, _)| size >= 1 << 20), "{out}");
    }
}

#[test]
fn fi_pingpong_tcp_tagged_small() {
    let (s, c) = pingpong_on(
        "fab_tcp",
        "rdm",
        &["-I", "200", "-S", "64", "-m", "tagged", "-c"],
    );
    for out in [&s, &c] {
        assert_eq!(rows(out), vec![(64, 200)], "{out}");
    }
}

/// `mpirun -n N` of `tests/mpi/<prog>.c` (given `prog_args`) with point-to-point on
/// Open MPI's `mtl ofi` over `prov` (verbose, to name the provider it opened), plus
/// `extra` arguments; returns its output after asserting it succeeded.
fn mpirun_ofi(
    n: u32,
    prov: &str,
    extra: &[&str],
    prog: &'static str,
    prog_args: &[&str],
) -> String {
    let n = n.to_string();
    let ofi = mtl_ofi(prov);
    let mut args = vec!["--allow-run-as-root", "--oversubscribe", "-n", &n];
    args.extend(ofi.iter().map(String::as_str));
    args.extend_from_slice(extra);
    let out = run(
        with_plugin(Command::new("mpirun").args(&args))
            .arg(mpi_prog(prog))
            .args(prog_args),
        Duration::from_secs(240),
        "mpirun",
    );
    let t = text(&out);
    assert!(out.status.success(), "mpirun failed:\n{t}");
    t
}

/// Runs the MPI point-to-point program on `n` ranks of Open MPI's `mtl ofi` over
/// `prov`, unmodified, its blocking sizes up to `max` bytes; asserts it succeeded and
/// that `prov` carried it.
fn mpi_over(prov: &str, n: u32, max: usize) {
    let t = mpirun_ofi(n, prov, &[], "p2p", &[&max.to_string()]);
    assert!(t.contains(&format!("ok p2p {n} ranks")), "{t}");
    // Every rank's mtl ofi opened our provider.
    assert_eq!(ranks_on(&t, prov), n as usize, "{t}");
}

#[test]
fn open_mpi_mtl_ofi_two_ranks() {
    mpi_over("fab_tcp", 2, 4 << 20);
}

#[test]
fn open_mpi_mtl_ofi_four_ranks() {
    mpi_over("fab_tcp", 4, 4 << 20);
}

/// fab_hybrid under Open MPI: its names fit the `FI_NAME_MAX` bytes mtl ofi keeps them
/// in, and ranks on one node reach each other through its shm half.
#[test]
fn open_mpi_mtl_ofi_four_ranks_hybrid() {
    mpi_over("fab_hybrid", 4, 4 << 20);
}

/// A job of 64 ranks on this host (oversubscribed), each with every other rank as a
/// live peer (`all_to_all` in `tests/mpi/p2p.c`), over fab_hybrid's shared memory and
/// over fab_tcp's connections.
#[test]
fn open_mpi_mtl_ofi_64_ranks() {
    for prov in ["fab_hybrid", "fab_tcp"] {
        mpi_over(prov, 64, 64 << 10);
    }
}

/// Intercommunicators made and used 200 times at 2 ranks (`tests/mpi/intercomm.c`): Open
/// MPI inserts the peer again for each one.
#[test]
fn open_mpi_intercommunicators_hybrid() {
    let t = mpirun_ofi(2, "fab_hybrid", &[], "intercomm", &[]);
    assert!(t.contains("done"), "{t}");
}

/// The whole C suite on fab_hybrid (remote peers claimed, opaque names).
#[test]
fn c_api_suite_hybrid() {
    let t = run_c_on("api", "fab_hybrid");
    for part in [
        "provider fab_hybrid",
        "ok getinfo",
        "ok messages (stack 1)",
        "ok peek and claim (stack 1)",
        "ok format 4 (stack 1)",
        "ok misuse",
        "ok wait and poll sets (stack 0)",
        "ok wait and poll sets (stack 1)",
        "ok eq",
        "checks passed",
    ] {
        assert!(t.contains(part), "missing {part:?} in:\n{t}");
    }
}

#[test]
fn c_two_processes_hybrid() {
    let t = run_c_on("xproc", "fab_hybrid");
    assert!(t.contains("ok two processes"), "{t}");
}

#[test]
fn fi_pingpong_hybrid_all_sizes_with_data_checks() {
    let (s, c) = pingpong_on("fab_hybrid", "rdm", &["-I", "10", "-S", "all", "-c"]);
    for out in [&s, &c] {
        let r = rows(out);
        assert!(r.len() >= 20, "too few sizes:\n{out}");
        assert!(r.iter().all(|&(_, n)| n == 10), "{out}");
        assert!(r.iter().any(|&(size, _)| size >= 1 << 20), "{out}");
    }
}

/// MPI one-sided communication through Open MPI's osc rdma on its btl ofi over
/// fab_tcp (point-to-point on mtl ofi, also fab_tcp): with `--mca btl ofi,self` no
/// other component reaches a peer, so a window works only if btl ofi took fab_tcp.
#[test]
fn open_mpi_one_sided_over_btl_ofi() {
    let extra = [
        "--mca",
        "osc",
        "rdma",
        "--mca",
        "btl",
        "ofi,self",
        "--mca",
        "btl_ofi_provider_include",
        "fab_tcp",
    ];
    let t = mpirun_ofi(4, "fab_tcp", &extra, "osc", &[]);
    assert!(t.contains("ok osc 4 ranks"), "{t}");
}

#[test]
fn fi_pingpong_tcp_msg_all_sizes_with_data_checks() {
    let (s, c) = pingpong_on("fab_tcp", "msg", &["-I", "10", "-S", "all", "-c"]);
    for out in [&s, &c] {
        let r = rows(out);
        assert!(r.len() >= 20, "too few sizes:\n{out}");
        assert!(r.iter().any(|&(size, _)| size == 1), "{out}");
        assert!(r.iter().all(|&(_, n)| n == 10), "{out}");
        assert!(r.iter().any(|&(size, _)| size >= 1 << 20), "{out}");
    }
}
