//! `info`: the `fi_info` analogue. Lists the providers this build knows and the
//! interfaces (`Info`s) they offer for the given hints, with `fi_info`'s flags:
//!
//! ```text
//! cargo run --release --example info -- [-p PROV] [-t FI_EP_RDM] [-c 'FI_MSG|FI_TAGGED'] [-v]
//! cargo run --release --example info -- -l          # providers only
//! cargo run --release --example info -- -e          # environment variables
//! ```
//!
//! Providers are compile-time stack parameters, so the list is the providers this
//! example is built with (loopback today); each one is queried through `getinfo` on its
//! default stack (`FI_THREAD_DOMAIN`, manual progress, `FI_AV_TABLE`). `FI_PROVIDER`
//! filters the list as libfabric's does (`a,b` includes, `^a,b` excludes). When nothing
//! matches, the error and exit status are `fi_info`'s: `fi_getinfo: -61 (No data
//! available)`, status 61; malformed options exit with status 22 (`EINVAL`).

use std::fmt::Write as _;
use std::process::ExitCode;

use clap::Parser;
use fabric::attr::{AddrFormat, EpType};
use fabric::flags::{Caps, Mode};
use fabric::info::{addr_format_name, ep_type_name, version};
use fabric::{getinfo, Error, Hints, Info, Provider, Stack};
use fabric_loopback::Loopback;
use fabric_shm::Shm;

/// The libfabric API version this crate models (`fi_info --version`'s "api").
const API_VERSION: u32 = version(1, 17);

/// `EINVAL`: `fi_info`'s exit status for malformed options.
const EXIT_INVAL: i32 = 22;

/// `fi_info`'s options, letter for letter.
#[derive(Parser, Debug, Default, Clone, PartialEq, Eq)]
#[command(
    name = "info",
    about = "Query the fabric interfaces (fi_info analogue)",
    disable_version_flag = true
)]
struct Args {
    /// source name or address
    #[arg(short = 's', long = "src_addr", value_name = "ADDR")]
    src_addr: Option<String>,
    /// dest node name or address
    #[arg(short = 'n', long = "node", value_name = "NAME")]
    node: Option<String>,
    /// port number
    #[arg(short = 'P', long = "port", value_name = "PNUM")]
    port: Option<String>,
    /// one or more capabilities: FI_MSG|FI_RMA...
    #[arg(short = 'c', long = "caps", value_name = "CAP1|CAP2..")]
    caps: Option<String>,
    /// one or more modes, default all modes
    #[arg(short = 'm', long = "mode", value_name = "MOD1|MOD2..")]
    mode: Option<String>,
    /// specify single endpoint type: FI_EP_MSG, FI_EP_DGRAM...
    #[arg(short = 't', long = "ep_type", value_name = "EPTYPE")]
    ep_type: Option<String>,
    /// specify the domain name
    #[arg(short = 'd', long = "domain", value_name = "DOMAIN")]
    domain: Option<String>,
    /// specify the fabric name
    #[arg(short = 'f', long = "fabric", value_name = "FABRIC")]
    fabric: Option<String>,
    /// specify accepted address format: FI_FORMAT_UNSPEC, FI_SOCKADDR...
    #[arg(short = 'a', long = "addr_format", value_name = "FMT")]
    addr_format: Option<String>,
    /// specify provider explicitly
    #[arg(short = 'p', long = "provider", value_name = "PROV")]
    provider: Option<String>,
    /// print libfabric environment variables
    #[arg(short = 'e', long = "env")]
    env: bool,
    /// print libfabric environment variables with substr
    #[arg(short = 'g', long = "getenv", value_name = "SUBSTR")]
    getenv: Option<String>,
    /// print fi_info structures containing substr
    #[arg(short = 'i', long = "info", value_name = "SUBSTR")]
    info: Option<String>,
    /// list available libfabric providers
    #[arg(short = 'l', long = "list")]
    list: bool,
    /// verbose output
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// print version info and exit
    #[arg(long = "version")]
    version: bool,
}

/// A failed run: the message for stderr and the exit status.
#[derive(Debug, PartialEq, Eq)]
struct Failure {
    status: i32,
    msg: String,
}

impl Failure {
    fn inval(msg: String) -> Self {
        Failure {
            status: EXIT_INVAL,
            msg,
        }
    }

    /// A `fi_getinfo` error, printed as `fi_info` does plus the `fi_strerror` text.
    fn getinfo(e: Error) -> Self {
        Failure {
            status: e.code(),
            msg: format!("fi_getinfo: -{} ({})", e.code(), e.as_str()),
        }
    }
}

/// One provider this build knows: its name, version and entry points on its default
/// stack. A table of function pointers because each provider is a different type.
struct ProviderEntry {
    name: &'static str,
    version: u32,
    getinfo: fn(Option<&Hints>) -> fabric::Result<Vec<Info>>,
    name_from_svc: fn(&str, &str) -> fabric::Result<Vec<u8>>,
}

impl ProviderEntry {
    fn of<P: Provider>() -> Self {
        ProviderEntry {
            name: P::NAME,
            version: P::VERSION,
            getinfo: getinfo::<Stack<P>>,
            name_from_svc: P::name_from_svc,
        }
    }
}

fn providers() -> Vec<ProviderEntry> {
    vec![ProviderEntry::of::<Shm>(), ProviderEntry::of::<Loopback>()]
}

/// One environment variable the library (or this build) reads.
struct EnvVar {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "FI_PROVIDER",
        kind: "String",
        help: "Only use specified providers: a comma-separated list, or with a leading ^ \
               the providers to exclude; read by `info` and by the runtime-dispatch registry \
               (default: all available)",
    },
    EnvVar {
        name: "FABRIC_DIRECT",
        kind: "String",
        help: "Build-time provider selection (fabric direct): the provider a build \
               compiles its stack against, read when compiling (default: unset, the \
               providers are chosen by the Stack type parameters)",
    },
];

/// `-e`/`-g`: each variable as `fi_info -e` prints it, plus its current value (and for
/// build-time variables the value this binary was built with).
fn format_env(filter: Option<&str>, get: &dyn Fn(&str) -> Option<String>) -> String {
    let filter = filter.map(str::to_ascii_lowercase);
    let mut out = String::new();
    for v in ENV_VARS {
        if let Some(f) = &filter {
            if !v.name.to_ascii_lowercase().contains(f.as_str()) {
                continue;
            }
        }
        let current = get(v.name).unwrap_or_else(|| "(not set)".to_string());
        let _ = writeln!(out, "# {}: {}", v.name, v.kind);
        let _ = writeln!(out, "# {}", v.help);
        let _ = writeln!(out, "# current value: {current}");
        if v.name == "FABRIC_DIRECT" {
            let built = option_env!("FABRIC_DIRECT").unwrap_or("(not set)");
            let _ = writeln!(out, "# value at build time: {built}");
        }
        out.push('\n');
    }
    out
}

/// Whether `FI_PROVIDER` (libfabric syntax) lets provider `name` be used.
fn provider_enabled(fi_provider: Option<&str>, name: &str) -> bool {
    let Some(list) = fi_provider.map(str::trim).filter(|l| !l.is_empty()) else {
        return true;
    };
    let (exclude, list) = match list.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let listed = list
        .split(',')
        .map(str::trim)
        .any(|p| p.eq_ignore_ascii_case(name));
    listed != exclude
}

/// The `FI_*` names of a flag set, `|`- or `,`-separated, `FI_` prefix optional, case
/// ignored; `what` names the kind in the error (`capability`, `mode`).
fn parse_flags<F: bitflags::Flags>(s: &str, what: &str) -> Result<F, Failure> {
    let mut out = F::empty();
    for word in s.split(['|', ',']).map(str::trim).filter(|w| !w.is_empty()) {
        let upper = word.to_ascii_uppercase();
        let bare = upper.strip_prefix("FI_").unwrap_or(&upper);
        let flag = F::from_name(bare)
            .ok_or_else(|| Failure::inval(format!("error: Unrecognized {what}: {word}")))?;
        out.insert(flag);
    }
    Ok(out)
}

fn parse_caps(s: &str) -> Result<Caps, Failure> {
    parse_flags(s, "capability")
}

fn parse_mode(s: &str) -> Result<Mode, Failure> {
    parse_flags(s, "mode")
}

/// `FI_EP_*` (or the bare `msg`/`rdm`/`dgram`), case ignored.
fn parse_ep_type(s: &str) -> Result<EpType, Failure> {
    [EpType::Unspec, EpType::Msg, EpType::Dgram, EpType::Rdm]
        .into_iter()
        .find(|&t| {
            let name = ep_type_name(t);
            name.eq_ignore_ascii_case(s) || name["FI_EP_".len()..].eq_ignore_ascii_case(s)
        })
        .ok_or_else(|| Failure::inval(format!("error: Unrecognized endpoint type: {s}")))
}

fn parse_addr_format(s: &str) -> Result<AddrFormat, Failure> {
    [
        AddrFormat::Unspec,
        AddrFormat::Sockaddr,
        AddrFormat::SockaddrIn,
        AddrFormat::SockaddrIn6,
        AddrFormat::Str,
        AddrFormat::Proto,
    ]
    .into_iter()
    .find(|&f| addr_format_name(f).eq_ignore_ascii_case(s))
    .ok_or_else(|| Failure::inval(format!("error: Unrecognized address format: {s}")))
}

/// Hints carry `&'static str` names (they are normally literals); a CLI makes a
/// handful once per run, so leaking them is the simple and bounded choice.
fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// The hints the options describe, without addresses (those are per provider).
fn hints_from(args: &Args) -> Result<Hints, Failure> {
    let mut h = Hints::new();
    if let Some(c) = &args.caps {
        h = h.caps(parse_caps(c)?);
    }
    if let Some(m) = &args.mode {
        h = h.mode(parse_mode(m)?);
    }
    if let Some(t) = &args.ep_type {
        h = h.ep_type(parse_ep_type(t)?);
    }
    if let Some(a) = &args.addr_format {
        h = h.addr_format(parse_addr_format(a)?);
    }
    if let Some(p) = &args.provider {
        h = h.prov_name(leak(p));
    }
    if let Some(d) = &args.domain {
        h = h.domain_name(leak(d));
    }
    if let Some(f) = &args.fabric {
        h = h.fabric_name(leak(f));
    }
    Ok(h)
}

/// `fi_getinfo(node, service, flags)` over every enabled provider: `-s ADDR` resolves
/// (`ADDR`, `-P`) as the source address (`FI_SOURCE`), `-n NODE` (with `-P`) as the
/// destination, as `fi_info` does.
fn query(args: &Args, fi_provider: Option<&str>) -> Result<Vec<Info>, Failure> {
    let hints = hints_from(args)?;
    let port = args.port.as_deref().unwrap_or("");
    let mut found = Vec::new();
    let mut last_err = Error::NoData;
    for p in providers() {
        if !provider_enabled(fi_provider, p.name) {
            continue;
        }
        let mut h = hints.clone();
        let resolved = (|| {
            if let Some(src) = &args.src_addr {
                h = h.clone().src_addr((p.name_from_svc)(src, port)?);
            }
            if args.node.is_some() || (args.src_addr.is_none() && args.port.is_some()) {
                let node = args.node.as_deref().unwrap_or("");
                h = h.clone().dest_addr((p.name_from_svc)(node, port)?);
            }
            (p.getinfo)(Some(&h))
        })();
        match resolved {
            Ok(infos) => found.extend(infos),
            Err(e) => last_err = e,
        }
    }
    if found.is_empty() {
        Err(Failure::getinfo(last_err))
    } else {
        Ok(found)
    }
}

fn format_infos(infos: &[Info], verbose: bool, substr: Option<&str>) -> String {
    let mut out = String::new();
    for info in infos {
        if verbose || substr.is_some() {
            let text = info.to_string_verbose();
            if substr.is_some_and(|s| !text.contains(s)) {
                continue;
            }
            out.push_str("---\n");
            out.push_str(&text);
        } else {
            let _ = writeln!(out, "{info}");
        }
    }
    out
}

/// `-l`: `name:` and `    version: major.minor` per provider.
fn format_list(fi_provider: Option<&str>) -> String {
    let mut out = String::new();
    for p in providers() {
        if provider_enabled(fi_provider, p.name) {
            let _ = writeln!(out, "{}:", p.name);
            let _ = writeln!(
                out,
                "    version: {}.{}",
                p.version >> 16,
                p.version & 0xffff
            );
        }
    }
    out
}

fn format_version() -> String {
    format!(
        "info: {v}\nfabric: {v}\nfabric api: {}.{}\n",
        API_VERSION >> 16,
        API_VERSION & 0xffff,
        v = env!("CARGO_PKG_VERSION"),
    )
}

/// The whole tool minus the process: stdout text or a failure. `get_env` reads the
/// environment (a parameter so tests need not mutate the process environment).
fn run(args: &Args, get_env: &dyn Fn(&str) -> Option<String>) -> Result<String, Failure> {
    if args.version {
        return Ok(format_version());
    }
    if args.env || args.getenv.is_some() {
        return Ok(format_env(args.getenv.as_deref(), get_env));
    }
    let fi_provider = get_env("FI_PROVIDER");
    if args.list {
        return Ok(format_list(fi_provider.as_deref()));
    }
    let infos = query(args, fi_provider.as_deref())?;
    Ok(format_infos(&infos, args.verbose, args.info.as_deref()))
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args, &|k| std::env::var(k).ok()) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(f) => {
            eprintln!("{}", f.msg);
            ExitCode::from(u8::try_from(f.status & 0xff).unwrap_or(1).max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cli: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("info").chain(cli.iter().copied())).unwrap()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn options_mirror_fi_info() {
        let a = args(&[
            "-p",
            "loopback",
            "-t",
            "FI_EP_RDM",
            "-c",
            "FI_MSG|FI_TAGGED",
            "-v",
            "-s",
            "x",
            "-n",
            "y",
            "-P",
            "7",
            "-m",
            "FI_CONTEXT",
            "-d",
            "dom",
            "-f",
            "fab",
            "-a",
            "FI_ADDR_PROTO",
            "-g",
            "prov",
            "-i",
            "sub",
            "-l",
            "-e",
        ]);
        assert_eq!(a.provider.as_deref(), Some("loopback"));
        assert_eq!(a.ep_type.as_deref(), Some("FI_EP_RDM"));
        assert_eq!(a.caps.as_deref(), Some("FI_MSG|FI_TAGGED"));
        assert!(a.verbose && a.list && a.env);
        assert_eq!(
            (a.src_addr.as_deref(), a.node.as_deref(), a.port.as_deref()),
            (Some("x"), Some("y"), Some("7"))
        );
        assert_eq!(a.mode.as_deref(), Some("FI_CONTEXT"));
        assert_eq!(
            (a.domain.as_deref(), a.fabric.as_deref()),
            (Some("dom"), Some("fab"))
        );
        assert_eq!(a.addr_format.as_deref(), Some("FI_ADDR_PROTO"));
        assert_eq!(
            (a.getenv.as_deref(), a.info.as_deref()),
            (Some("prov"), Some("sub"))
        );
        let long = args(&[
            "--provider=loopback",
            "--ep_type=FI_EP_DGRAM",
            "--env",
            "--version",
        ]);
        assert_eq!(long.provider.as_deref(), Some("loopback"));
        assert_eq!(long.ep_type.as_deref(), Some("FI_EP_DGRAM"));
        assert!(long.env && long.version);
        assert!(Args::try_parse_from(["info", "--bogus"]).is_err());
    }

    #[test]
    fn caps_parse_pipes_and_commas() {
        assert_eq!(
            parse_caps("FI_MSG|FI_TAGGED").unwrap(),
            Caps::MSG | Caps::TAGGED
        );
        assert_eq!(
            parse_caps("FI_RMA, fi_read,REMOTE_WRITE").unwrap(),
            Caps::RMA | Caps::READ | Caps::REMOTE_WRITE
        );
        assert_eq!(parse_caps("").unwrap(), Caps::empty());
        let e = parse_caps("FI_MSG|FI_BOGUS").unwrap_err();
        assert_eq!(e.status, EXIT_INVAL);
        assert_eq!(e.msg, "error: Unrecognized capability: FI_BOGUS");
        assert_eq!(
            parse_mode("FI_CONTEXT|FI_LOCAL_MR").unwrap(),
            Mode::CONTEXT | Mode::LOCAL_MR
        );
        assert_eq!(
            parse_mode("FI_X").unwrap_err().msg,
            "error: Unrecognized mode: FI_X"
        );
    }

    #[test]
    fn enum_names_parse() {
        assert_eq!(parse_ep_type("FI_EP_RDM").unwrap(), EpType::Rdm);
        assert_eq!(parse_ep_type("dgram").unwrap(), EpType::Dgram);
        assert_eq!(
            parse_ep_type("FI_EP_FOO").unwrap_err().msg,
            "error: Unrecognized endpoint type: FI_EP_FOO"
        );
        assert_eq!(
            parse_addr_format("FI_ADDR_PROTO").unwrap(),
            AddrFormat::Proto
        );
        assert!(parse_addr_format("FI_NOPE").is_err());
    }

    #[test]
    fn plain_output_is_fi_info_shaped() {
        let out = run(&args(&["-p", "loopback", "-t", "FI_EP_RDM"]), &no_env).unwrap();
        assert_eq!(
            out,
            "provider: loopback\n    fabric: loopback\n    domain: loopback\n    \
             version: 1.0\n    type: FI_EP_RDM\n    protocol: FI_PROTO_UNSPEC\n"
        );
        let all = run(&args(&[]), &no_env).unwrap();
        // RDM, DGRAM and (connection management) MSG.
        assert_eq!(all.matches("provider: loopback").count(), 3);
        assert!(all.contains("type: FI_EP_DGRAM"));
        assert!(all.contains("type: FI_EP_MSG"));
    }

    #[test]
    fn verbose_output_has_separators_and_default_stack() {
        let out = run(
            &args(&["-v", "-p", "loopback", "-t", "FI_EP_DGRAM", "-c", "FI_MSG"]),
            &no_env,
        )
        .unwrap();
        assert!(out.starts_with("---\nfi_info:\n    caps: [ FI_MSG"));
        assert_eq!(out.matches("---\n").count(), 1);
        assert!(out.contains("        threading: FI_THREAD_DOMAIN\n"));
        assert!(out.contains("        data_progress: FI_PROGRESS_MANUAL\n"));
        assert!(out.contains("        av_type: FI_AV_TABLE\n"));
        assert!(out.contains("        type: FI_EP_DGRAM\n"));
        let filtered = run(&args(&["-p", "loopback", "-i", "FI_EP_RDM"]), &no_env).unwrap();
        assert_eq!(filtered.matches("fi_info:").count(), 1);
        assert!(filtered.contains("type: FI_EP_RDM"));
    }

    #[test]
    fn unknown_provider_is_fi_getinfo_nodata() {
        let e = run(&args(&["-p", "nosuch"]), &no_env).unwrap_err();
        assert_eq!(e.status, 61);
        assert_eq!(e.msg, "fi_getinfo: -61 (No data available)");
        // A capability the provider lacks is the same error.
        let e = run(&args(&["-c", "FI_MULTICAST"]), &no_env).unwrap_err();
        assert_eq!(e.status, 61);
        // Excluding every provider (FI_PROVIDER) leaves nothing.
        let none = |k: &str| (k == "FI_PROVIDER").then(|| "^loopback,shm".to_string());
        assert_eq!(run(&args(&[]), &none).unwrap_err().status, 61);
    }

    #[test]
    fn fi_provider_filters() {
        assert!(provider_enabled(None, "loopback"));
        assert!(provider_enabled(Some(""), "loopback"));
        assert!(provider_enabled(Some("tcp,loopback"), "loopback"));
        assert!(!provider_enabled(Some("tcp"), "loopback"));
        assert!(!provider_enabled(Some("^tcp,loopback"), "loopback"));
        assert!(provider_enabled(Some("^tcp"), "loopback"));
        let env = |k: &str| (k == "FI_PROVIDER").then(|| "tcp".to_string());
        assert_eq!(run(&args(&[]), &env).unwrap_err().status, 61);
        assert_eq!(run(&args(&["-l"]), &env).unwrap(), "");
    }

    #[test]
    fn list_and_version() {
        assert_eq!(
            run(&args(&["-l"]), &no_env).unwrap(),
            "shm:\n    version: 1.0\nloopback:\n    version: 1.0\n"
        );
        let v = run(&args(&["--version"]), &no_env).unwrap();
        assert!(v.starts_with("info: ") && v.ends_with("fabric api: 1.17\n"));
    }

    #[test]
    fn env_lists_variables_with_values() {
        let env = |k: &str| (k == "FI_PROVIDER").then(|| "loopback".to_string());
        let out = run(&args(&["-e"]), &env).unwrap();
        assert!(out.contains("# FI_PROVIDER: String\n"));
        assert!(out.contains("# current value: loopback\n"));
        assert!(out.contains("# FABRIC_DIRECT: String\n"));
        assert!(out.contains("# current value: (not set)\n"));
        let only = run(&args(&["-g", "direct"]), &env).unwrap();
        assert!(only.contains("FABRIC_DIRECT") && !only.contains("FI_PROVIDER"));
    }

    #[test]
    fn node_and_port_become_addresses() {
        // Loopback resolves ("localhost", "5") to endpoint id 5.
        let a = args(&["-n", "localhost", "-P", "5", "-v", "-t", "FI_EP_RDM"]);
        let out = run(&a, &no_env).unwrap();
        assert!(out.contains("    dest_addrlen: 8\n"));
        assert!(out.contains("    src_addrlen: 0\n"));
        let s = args(&["-s", "loopback", "-P", "9", "-v", "-t", "FI_EP_RDM"]);
        let out = run(&s, &no_env).unwrap();
        assert!(out.contains("    src_addrlen: 8\n"));
        assert!(out.contains("    dest_addrlen: 0\n"));
        // A node loopback cannot reach is fi_getinfo's error, not a crash.
        let e = run(&args(&["-n", "example.com", "-P", "1"]), &no_env).unwrap_err();
        assert_eq!(e.msg, "fi_getinfo: -99 (Cannot assign requested address)");
    }
}
