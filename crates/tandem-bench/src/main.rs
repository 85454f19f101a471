//! `tandem-bench`: the benchmark `scripts/bench.sh` runs.
//!
//! ```text
//! tandem-bench --uri mongodb://127.0.0.1:PORT/ [--quick] [--fawn-modules DIR] [--node NODE]
//!              [--out target/bench-report.md] [--build-time TEXT] [--server TEXT]
//!              [--profile FILE.md] [--skip-embedded] [--proxy-delay DELAY] [--summary FILE]
//! ```
//!
//! Runs the interleaved server benchmark of every variant, then the embedded-store
//! measurements (and the memory measurement, through the `tandem-bench-memory`
//! binary beside this one), prints the Markdown report and writes it to `--out`.
//! Then prints the one-line summary (`bench: rt_commit=… …`, see
//! [`Summary::line`](tandem_bench::report::Summary::line)) as the last line of
//! its output, or writes it to `--summary FILE` instead.
//!
//! With `--proxy-delay DELAY` (e.g. `1ms`; `250us`, `0.5ms` and `2s` work too),
//! every client — the Rust variants and Fawn's Node process — connects through a
//! [`Proxy`](tandem_bench::proxy::Proxy) on 127.0.0.1 that delays each request
//! by `DELAY`: one simulated network round trip per request.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tandem::{CommitPoint, Strategy};
use tandem_bench::embedded::{self, MemoryBreakdown};
use tandem_bench::fawn::FawnDriver;
use tandem_bench::proxy::{parse_delay, Proxy};
use tandem_bench::report::{load, Embedded, Machine, Report};
use tandem_bench::server::{connect, Plan, ServerBench, Variant, DB};

/// The in-flight transactions left for the recovery and memory measurements.
const IN_FLIGHT: usize = 10_000;

struct Args {
    uri: Option<String>,
    quick: bool,
    fawn_modules: Option<PathBuf>,
    node: String,
    out: PathBuf,
    build_time: Option<String>,
    server: String,
    profile: Option<PathBuf>,
    skip_embedded: bool,
    proxy_delay: Option<std::time::Duration>,
    summary: Option<PathBuf>,
}

fn usage() -> &'static str {
    "usage: tandem-bench --uri URI [--quick] [--fawn-modules DIR] [--node NODE] [--out FILE] \
[--build-time TEXT] [--server TEXT] [--profile FILE] [--skip-embedded] [--proxy-delay DELAY] \
[--summary FILE]"
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        uri: None,
        quick: false,
        fawn_modules: None,
        node: "node".into(),
        out: PathBuf::from("target/bench-report.md"),
        build_time: None,
        server: "a MongoDB-compatible server".into(),
        profile: None,
        skip_embedded: false,
        proxy_delay: None,
        summary: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--uri" => args.uri = Some(value("--uri")?),
            "--quick" => args.quick = true,
            "--fawn-modules" => args.fawn_modules = Some(value("--fawn-modules")?.into()),
            "--node" => args.node = value("--node")?,
            "--out" => args.out = value("--out")?.into(),
            "--build-time" => args.build_time = Some(value("--build-time")?),
            "--server" => args.server = value("--server")?,
            "--profile" => args.profile = Some(value("--profile")?.into()),
            "--skip-embedded" => args.skip_embedded = true,
            "--proxy-delay" => args.proxy_delay = Some(parse_delay(&value("--proxy-delay")?)?),
            "--summary" => args.summary = Some(value("--summary")?.into()),
            "-h" | "--help" => return Err(usage().into()),
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    Ok(args)
}

fn say(line: &str) {
    eprintln!("tandem-bench: {line}");
}

/// The memory figures, from the `tandem-bench-memory` binary beside this one.
fn memory_measurement() -> Result<MemoryBreakdown, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let sibling = exe.with_file_name("tandem-bench-memory");
    let out = std::process::Command::new(&sibling)
        .arg(IN_FLIGHT.to_string())
        .output()
        .map_err(|e| format!("running {}: {e}", sibling.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> Result<f64, String> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("no {name} in the output of {}: {text}", sibling.display()))
    };
    Ok(MemoryBreakdown {
        per_in_flight: field("bytes_per_in_flight")?,
        record_bson: field("record_bson")?,
        record_in_memory: field("record_in_memory")?,
        allocations_per_transfer: field("allocations_per_transfer")?,
    })
}

/// The `host:port` of a `mongodb://` URI with one host.
fn host_port(uri: &str) -> Result<&str, String> {
    let rest = uri
        .strip_prefix("mongodb://")
        .ok_or_else(|| format!("not a mongodb:// URI: {uri}"))?;
    let hosts = rest.split(['/', '?']).next().unwrap_or_default();
    let host = hosts.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.contains(',') {
        return Err(format!("--proxy-delay needs a URI with one host: {uri}"));
    }
    Ok(host)
}

/// The URI of the same server through a proxy at `proxy`: the proxy's address
/// in place of the host, and a direct connection, so that the driver does not
/// go on to the hosts the server lists in its `hello` (its real address).
fn through(uri: &str, host: &str, proxy: std::net::SocketAddr) -> String {
    let uri = uri.replacen(host, &proxy.to_string(), 1);
    let (base, query) = uri.split_once('?').unwrap_or((&uri, ""));
    let base = if base.ends_with('/') {
        base.to_owned()
    } else {
        format!("{base}/")
    };
    let query = query
        .split('&')
        .filter(|o| !o.is_empty() && !o.to_ascii_lowercase().starts_with("replicaset="))
        .chain(["directConnection=true"])
        .collect::<Vec<_>>()
        .join("&");
    format!("{base}?{query}")
}

async fn server_part(args: &Args, report: &mut Report) -> Result<(), String> {
    let Some(server_uri) = &args.uri else {
        return Err("--uri is required".into());
    };
    let proxy = match args.proxy_delay {
        None => None,
        Some(delay) => {
            let host = host_port(server_uri)?;
            let upstream = tokio::net::lookup_host(host)
                .await
                .map_err(|e| format!("resolving {host}: {e}"))?
                .next()
                .ok_or_else(|| format!("{host} resolves to no address"))?;
            let proxy =
                Proxy::start(upstream, delay).map_err(|e| format!("starting the proxy: {e}"))?;
            let uri = through(server_uri, host, proxy.addr());
            say(&format!(
                "every client connects through a proxy adding {delay:?} per request: {uri}"
            ));
            Some((proxy, uri))
        }
    };
    let uri = proxy.as_ref().map_or(server_uri, |(_, u)| u);
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    report.levels = plan.levels.to_vec();
    let (client, monitor) = connect(uri).await?;
    let fawn = match &args.fawn_modules {
        None => {
            report.fawn_missing = Some("no --fawn-modules given".into());
            None
        }
        Some(modules) => {
            let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("node/fawn_bench.js");
            match FawnDriver::start(
                &args.node,
                &script,
                modules,
                uri,
                DB,
                plan.pool,
                &Variant::Fawn.accounts(),
            )
            .await
            {
                Ok(f) => Some(f),
                Err(e) => {
                    say(&format!("Fawn unavailable: {e}"));
                    report.fawn_missing = Some(e);
                    None
                }
            }
        }
    };
    let t0 = Instant::now();
    let mut bench = ServerBench::prepare(client, monitor, plan, fawn).await?;
    let result = bench.run(&mut |line| say(line)).await;
    if result.is_ok() {
        bench.count_run().await;
    }
    bench.shutdown().await;
    result?;
    report.server_time = t0.elapsed();
    report.audit = bench.audit().await?;
    if let Some((proxy, _)) = &proxy {
        report.proxy = Some((proxy.delay(), proxy.stats()));
    }
    report.variants = bench
        .entries
        .iter()
        .map(|e| (e.variant, e.measured.clone()))
        .collect();
    Ok(())
}

fn embedded_part(quick: bool) -> Embedded {
    let transfers = if quick { 20_000 } else { 100_000 };
    let per_store = embedded::PER_STORE;
    say(&format!(
        "embedded store: {transfers} transfers, CommitPoint::Done"
    ));
    let done_tps = embedded::transfers_per_second(CommitPoint::Done, transfers, per_store);
    say(&format!(
        "embedded store: {transfers} transfers, CommitPoint::Applied"
    ));
    let applied_tps = embedded::transfers_per_second(CommitPoint::Applied, transfers, per_store);
    say(&format!(
        "embedded store: {transfers} transfers, Strategy::Native"
    ));
    let native_tps = embedded::transfers_per_second_with(
        CommitPoint::Done,
        Strategy::Native,
        transfers,
        per_store,
    );
    let one_store = if quick {
        None
    } else {
        let n = 50_000;
        say(&format!("embedded store: {n} transfers on one store"));
        Some((n, embedded::transfers_per_second(CommitPoint::Done, n, n)))
    };
    say(&format!(
        "embedded store: recovery of {IN_FLIGHT} in-flight transfers"
    ));
    let recovered_per_sec = embedded::recovered_per_second(IN_FLIGHT);
    say("embedded store: memory per in-flight transfer");
    let memory = match memory_measurement() {
        Ok(b) => Some(b),
        Err(e) => {
            say(&format!("memory not measured: {e}"));
            None
        }
    };
    Embedded {
        done_tps,
        applied_tps,
        native_tps,
        transfers,
        per_store,
        one_store,
        recovered_per_sec,
        recovered: IN_FLIGHT,
        memory,
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut report = Report {
        mode: format!(
            "{}{}",
            if args.quick { "quick" } else { "full" },
            args.proxy_delay.map_or_else(String::new, |d| format!(
                ", through a proxy adding {} per request",
                delay_text(d)
            ))
        ),
        command: format!(
            "bash scripts/bench.sh{}{}",
            if args.quick { " --quick" } else { "" },
            args.proxy_delay
                .map_or_else(String::new, |d| format!(" --proxy-delay {}", delay_text(d)))
        ),
        machine: Machine::read(),
        server: args.server.clone(),
        build_time: args.build_time.clone(),
        ..Report::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("building the runtime");
    if let Err(e) = rt.block_on(server_part(&args, &mut report)) {
        say(&format!("server benchmark failed: {e}"));
        return ExitCode::FAILURE;
    }
    drop(rt);
    if !args.skip_embedded {
        report.embedded = Some(embedded_part(args.quick));
    }
    if let Some(p) = &args.profile {
        report.profile = std::fs::read_to_string(p).ok();
    }
    report.machine.load_end = load();
    let text = report.render();
    println!("{text}");
    if let Some(dir) = args.out.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&args.out, &text) {
        say(&format!("writing {}: {e}", args.out.display()));
        return ExitCode::FAILURE;
    }
    say(&format!("report written to {}", args.out.display()));
    let summary = report.summary().line();
    match &args.summary {
        None => println!("{summary}"),
        Some(path) => {
            if let Err(e) = std::fs::write(path, format!("{summary}\n")) {
                say(&format!("writing {}: {e}", path.display()));
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// A delay as `--proxy-delay` takes it: `1ms`, `250us`.
fn delay_text(d: std::time::Duration) -> String {
    if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}us", d.as_micros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxied_uris() {
        let proxy: std::net::SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let uri = "mongodb://127.0.0.1:27017/";
        let host = host_port(uri).unwrap();
        assert_eq!(host, "127.0.0.1:27017");
        assert_eq!(
            through(uri, host, proxy),
            "mongodb://127.0.0.1:4000/?directConnection=true"
        );
        let uri = "mongodb://u:p@db:27017/?replicaSet=rs0&w=majority";
        let host = host_port(uri).unwrap();
        assert_eq!(host, "db:27017");
        assert_eq!(
            through(uri, host, proxy),
            "mongodb://u:p@127.0.0.1:4000/?w=majority&directConnection=true"
        );
        assert!(host_port("mongodb://a:1,b:2/").is_err());
        assert_eq!(delay_text(std::time::Duration::from_millis(1)), "1ms");
        assert_eq!(delay_text(std::time::Duration::from_micros(250)), "250us");
    }
}
