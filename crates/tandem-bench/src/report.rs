//! The Markdown report of a run.

use std::fmt::Write as _;
use std::time::Duration;

use crate::server::{Measured, Variant};
use crate::stats::{ms, Latency};

/// Facts about the machine, read at the start of a run.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    /// Cores this process may use.
    pub cores: usize,
    /// The CPU model, from `/proc/cpuinfo`.
    pub cpu: String,
    /// `/proc/loadavg` at the start of the run.
    pub load_start: String,
    /// `/proc/loadavg` at the end of the run.
    pub load_end: String,
    /// The kernel, from `/proc/sys/kernel/osrelease`.
    pub kernel: String,
}

impl Machine {
    /// Reads the machine facts (empty strings where `/proc` has nothing).
    pub fn read() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            .unwrap_or_else(|| "unknown".into());
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
            load_start: load(),
            load_end: String::new(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_owned(),
        }
    }
}

/// The first three fields of `/proc/loadavg`.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The embedded-store measurements.
#[derive(Clone, Copy, Debug, Default)]
pub struct Embedded {
    /// Transfers per second, `CommitPoint::Done`.
    pub done_tps: f64,
    /// Transfers per second, `CommitPoint::Applied`.
    pub applied_tps: f64,
    /// Transfers per second with `Strategy::Native` (the store's own all-or-nothing).
    pub native_tps: f64,
    /// Transfers measured for each of the two.
    pub transfers: u64,
    /// Transfers per fresh store (the store is rebuilt, untimed, after this many).
    pub per_store: u64,
    /// Transfers per second (`Done`) with no fresh store: `(transfers, rate)`.
    pub one_store: Option<(u64, f64)>,
    /// In-flight transactions recovered per second by one `run_once`.
    pub recovered_per_sec: f64,
    /// How many were recovered.
    pub recovered: usize,
    /// Memory per in-flight transaction and allocations per transfer, if measured.
    pub memory: Option<crate::embedded::MemoryBreakdown>,
}

/// Everything a report shows.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// `quick` or `full`.
    pub mode: String,
    /// The command that produced it.
    pub command: String,
    /// The machine.
    pub machine: Machine,
    /// The server's description (e.g. `SecantusDB 0.7.0b3`).
    pub server: String,
    /// The build time, if the caller measured it.
    pub build_time: Option<String>,
    /// Wall time of the server benchmark.
    pub server_time: Duration,
    /// The concurrency levels.
    pub levels: Vec<usize>,
    /// Per variant: what was measured.
    pub variants: Vec<(Variant, Measured)>,
    /// Per variant: the balance audit.
    pub audit: Vec<(Variant, bool, String)>,
    /// The embedded measurements.
    pub embedded: Option<Embedded>,
    /// Why Fawn is missing, if it is.
    pub fawn_missing: Option<String>,
    /// Profiling notes to include verbatim (Markdown), if any.
    pub profile: Option<String>,
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{x:.digits$}"))
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**missed**"
    }
}

/// Derived per-variant figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct Row {
    /// Sequential latency.
    pub latency: Latency,
    /// Wire commands per transfer (sequential batches).
    pub commands: f64,
    /// `MongoStore::metrics()` commands per transfer, for tandem's two-phase variants.
    pub store_commands: Option<f64>,
    /// Sequential round trips (the probe's waves until the call returned).
    pub round_trips: u64,
    /// `Receipt::round_trips` averaged, or the fixed count.
    pub reported_round_trips: f64,
    /// Client CPU per transfer.
    pub cpu_per_tx: Duration,
}

impl Row {
    /// The figures of one variant.
    pub fn of(m: &Measured) -> Self {
        let n = m.latencies.len().max(1) as f64;
        Row {
            latency: Latency::of(&m.latencies),
            commands: m.seq_commands as f64 / n,
            store_commands: m.store_commands.map(|c| c as f64 / n),
            round_trips: m.probe_until_return.waves,
            reported_round_trips: m.reported_round_trips as f64 / n,
            cpu_per_tx: m.seq_cpu.div_f64(n),
        }
    }
}

impl Report {
    fn find(&self, v: Variant) -> Option<&Measured> {
        self.variants.iter().find(|(x, _)| *x == v).map(|(_, m)| m)
    }

    /// The report as Markdown.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "# tandem benchmark report\n");
        let _ = writeln!(
            s,
            "Mode: **{}**. Produced by `{}`.\n",
            self.mode, self.command
        );
        self.render_machine(&mut s);
        self.render_table(&mut s);
        self.render_targets(&mut s);
        self.render_traces(&mut s);
        self.render_embedded(&mut s);
        if let Some(p) = &self.profile {
            let _ = writeln!(s, "## Profile of the embedded store\n\n{p}\n");
        }
        self.render_audit(&mut s);
        self.render_method(&mut s);
        s
    }

    fn render_machine(&self, s: &mut String) {
        let m = &self.machine;
        let _ = writeln!(s, "## Machine\n");
        let _ = writeln!(
            s,
            "- {} cores ({}), Linux {}; shared with other builds, so absolute numbers move from run to run",
            m.cores, m.cpu, m.kernel
        );
        let _ = writeln!(
            s,
            "- load average at start: {}; at end: {}",
            m.load_start, m.load_end
        );
        let _ = writeln!(
            s,
            "- server: {}, on 127.0.0.1, same machine as the clients",
            self.server
        );
        if let Some(b) = &self.build_time {
            let _ = writeln!(s, "- release build of `tandem-bench` before the run: {b}");
        }
        let _ = writeln!(
            s,
            "- server benchmark wall time: {:.1} s\n",
            self.server_time.as_secs_f64()
        );
    }

    fn render_table(&self, s: &mut String) {
        let _ = writeln!(s, "## One transfer (A → B, 1 unit) against the server\n");
        let mut header = "| variant | median ms | p99 ms |".to_owned();
        let mut rule = "|---|---:|---:|".to_owned();
        for c in &self.levels {
            let _ = write!(header, " tx/s @{c} |");
            rule.push_str("---:|");
        }
        header.push_str(" commands/tx | round trips/tx | client CPU µs/tx |");
        rule.push_str("---:|---:|---:|");
        let _ = writeln!(s, "{header}\n{rule}");
        for (v, m) in &self.variants {
            let r = Row::of(m);
            let mut line = format!(
                "| {} | {:.2} | {:.2} |",
                v.label(),
                ms(r.latency.median),
                ms(r.latency.p99)
            );
            for c in &self.levels {
                let _ = write!(line, " {} |", opt(m.tps(*c), 1));
            }
            let commands = match r.store_commands {
                Some(sc) => format!("{:.2} ({sc:.2})", r.commands),
                None => format!("{:.2}", r.commands),
            };
            let rt = match v {
                Variant::TandemApplied
                | Variant::TandemGrouped
                | Variant::TandemDone
                | Variant::TandemNative => {
                    format!("{} ({:.0})", r.round_trips, r.reported_round_trips)
                }
                _ => r.round_trips.to_string(),
            };
            let cpu = if *v == Variant::Fawn {
                format!("{:.0} (Node)", r.cpu_per_tx.as_secs_f64() * 1e6)
            } else {
                format!("{:.0}", r.cpu_per_tx.as_secs_f64() * 1e6)
            };
            let _ = writeln!(line, " {commands} | {rt} | {cpu} |");
            s.push_str(&line);
        }
        let samples = self.variants.first().map_or(0, |(_, m)| m.latencies.len());
        let _ = writeln!(
            s,
            "\n{samples} sequential transfers per variant for the latencies; throughput over {} transfers per variant and level.",
            self.variants
                .first()
                .and_then(|(_, m)| m.throughput.first())
                .map_or(0, |t| t.1)
        );
        let _ = writeln!(
            s,
            "Commands/tx: counted on the wire by the driver's command monitoring (in parentheses: `MongoStore::metrics()`, which counts what tandem's two-phase steps send; the native strategy's session commands bypass it). \
Round trips/tx: commands sent while no other command of the client was in flight, for one transfer run alone until the call returned (in parentheses: `Receipt::round_trips`). \
Client CPU: user+system time of the client process (`getrusage`) over the sequential batches, background finishing included, divided by the transfers.\n"
        );
        if let Some(why) = &self.fawn_missing {
            let _ = writeln!(s, "Fawn was not measured: {why}\n");
        }
        for (v, m) in &self.variants {
            if m.errors > 0 {
                let _ = writeln!(
                    s,
                    "- {}: {} transfers failed; first error: {}",
                    v.label(),
                    m.errors,
                    m.first_error.as_deref().unwrap_or("?")
                );
            }
        }
    }

    fn render_targets(&self, s: &mut String) {
        let _ = writeln!(s, "## Targets\n");
        let _ = writeln!(
            s,
            "| target | measured | ratio | verdict |\n|---|---|---:|---|"
        );
        let row = |v| self.find(v).map(Row::of);
        if let (Some(a), Some(b)) = (row(Variant::HandWritten), row(Variant::TandemApplied)) {
            // Median latency of (a) against each tandem variant that returns a commit.
            let latency_rows = [
                (
                    Variant::TandemApplied,
                    "tandem two-phase ≥ 1.5× lower median commit latency than hand-written",
                    "b",
                ),
                (
                    Variant::TandemAppliedIsolated,
                    "(same, finishing drained between transfers)",
                    "b",
                ),
                (
                    Variant::TandemGrouped,
                    "(same, with `finish_delay` 20 ms: b'')",
                    "b''",
                ),
                (Variant::TandemDone, "(same, returning at `done`: b')", "b'"),
            ];
            for (variant, target, tag) in latency_rows {
                let Some(t) = row(variant) else { continue };
                let ratio = ms(a.latency.median) / ms(t.latency.median).max(1e-9);
                let _ = writeln!(
                    s,
                    "| {target} | (a) {:.2} ms vs ({tag}) {:.2} ms | {ratio:.2}× | {} |",
                    ms(a.latency.median),
                    ms(t.latency.median),
                    verdict(ratio >= 1.5)
                );
                if variant == Variant::TandemAppliedIsolated {
                    let rt = a.round_trips as f64 / (b.round_trips.max(1)) as f64;
                    let _ = writeln!(
                        s,
                        "| (same, in sequential round trips until the call returns) | (a) {} vs (b) {} | {rt:.2}× | {} |",
                        a.round_trips,
                        b.round_trips,
                        verdict(rt >= 1.5)
                    );
                }
            }
            let cpu = b.cpu_per_tx.as_secs_f64() / a.cpu_per_tx.as_secs_f64().max(1e-12);
            let _ = writeln!(
                s,
                "| tandem client CPU per transaction within 5% of hand-written | (a) {:.0} µs vs (b) {:.0} µs | {cpu:.2}× | {} |",
                a.cpu_per_tx.as_secs_f64() * 1e6,
                b.cpu_per_tx.as_secs_f64() * 1e6,
                verdict(cpu <= 1.05)
            );
        }
        for (variant, tag, how) in [
            (Variant::TandemApplied, "b", ""),
            (Variant::TandemGrouped, "b''", " (`finish_delay` 20 ms)"),
        ] {
            let (Some(b), Some(d)) = (self.find(variant), self.find(Variant::Fawn)) else {
                continue;
            };
            for c in &self.levels {
                if let (Some(tb), Some(td)) = (b.tps(*c), d.tps(*c)) {
                    let ratio = tb / td.max(1e-9);
                    let _ = writeln!(
                        s,
                        "| tandem two-phase{how} ≥ 2× Fawn's throughput, {c} concurrent | ({tag}) {tb:.1} vs (d) {td:.1} tx/s | {ratio:.2}× | {} |",
                        verdict(ratio >= 2.0)
                    );
                }
            }
        }
        if let Some(e) = &self.embedded {
            for (name, tps) in [
                ("two-phase, Applied", e.applied_tps),
                ("two-phase, Done", e.done_tps),
                ("native", e.native_tps),
            ] {
                let _ = writeln!(
                    s,
                    "| embedded store ≥ 100,000 transfers/s on one core ({name}) | {tps:.0} /s | {:.2}× | {} |",
                    tps / 100_000.0,
                    verdict(tps >= 100_000.0)
                );
            }
        }
        s.push('\n');
    }

    fn render_traces(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "## One transfer alone, command by command\n\n\
Each command's time as the driver measured it (send to reply), for one transfer with nothing else running; \
`‖` marks where the call returned, commands after it ran in the background. Fawn's commands are counted, not timed.\n"
        );
        let _ = writeln!(s, "| variant | commands (ms) | sum ms |\n|---|---|---:|");
        for (v, m) in &self.variants {
            if m.probe_trace.is_empty() {
                continue;
            }
            let split = m.probe_until_return.commands as usize;
            let mut line = String::new();
            for (i, (name, took)) in m.probe_trace.iter().enumerate() {
                if i == split && split < m.probe_trace.len() {
                    line.push_str("‖ ");
                }
                let _ = write!(line, "{name} {:.1}, ", ms(*took));
            }
            let line = line.trim_end_matches([',', ' ']);
            let sum: Duration = m.probe_trace.iter().map(|(_, d)| *d).sum();
            let _ = writeln!(s, "| {} | {line} | {:.1} |", v.label(), ms(sum));
        }
        s.push('\n');
    }

    fn render_embedded(&self, s: &mut String) {
        let Some(e) = &self.embedded else { return };
        let _ = writeln!(s, "## Embedded store (one core, current-thread runtime)\n");
        let _ = writeln!(s, "| measurement | result |\n|---|---:|");
        let _ = writeln!(
            s,
            "| transfers/s, `CommitPoint::Done` ({} transfers, fresh store every {}) | {:.0} |",
            e.transfers, e.per_store, e.done_tps
        );
        let _ = writeln!(
            s,
            "| transfers/s, `CommitPoint::Applied` ({} transfers, fresh store every {}, background finishing included) | {:.0} |",
            e.transfers, e.per_store, e.applied_tps
        );
        let _ = writeln!(
            s,
            "| transfers/s, `Strategy::Native` ({} transfers, fresh store every {}) | {:.0} |",
            e.transfers, e.per_store, e.native_tps
        );
        if let Some((n, tps)) = e.one_store {
            let _ = writeln!(
                s,
                "| transfers/s, `CommitPoint::Done`, {n} transfers on one store (no garbage collection: tombstones pile up on the 256 accounts) | {tps:.0} |"
            );
        }
        let _ = writeln!(
            s,
            "| in-flight transactions recovered/s (`RecoveryWorker::run_once`, batch {}) | {:.0} |",
            e.recovered, e.recovered_per_sec
        );
        match &e.memory {
            Some(m) => {
                let _ = writeln!(
                    s,
                    "| bytes per in-flight transaction (10,000 in `pending`) | {:.0} |",
                    m.per_in_flight
                );
                let _ = writeln!(
                    s,
                    "| of which its record: in memory / as BSON | {:.0} / {:.0} |",
                    m.record_in_memory, m.record_bson
                );
                let _ = writeln!(
                    s,
                    "| heap allocations per transfer (`Done`) | {:.0} |",
                    m.allocations_per_transfer
                );
            }
            None => {
                let _ = writeln!(s, "| bytes per in-flight transaction | not measured |");
            }
        }
        let _ = writeln!(
            s,
            "\nWhere the embedded store's time goes, and changes that would speed it up: the guide's Performance chapter (`book/src/performance.md`); `target/release/tandem-bench-profile` is the binary to profile."
        );
        s.push('\n');
    }

    fn render_audit(&self, s: &mut String) {
        if self.audit.is_empty() {
            return;
        }
        let _ = writeln!(s, "## Audit after the run\n");
        for (v, ok, note) in &self.audit {
            let _ = writeln!(
                s,
                "- {}: {} — {note}",
                v.label(),
                if *ok { "ok" } else { "NOT OK" }
            );
        }
        s.push('\n');
    }

    fn render_method(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "## How it was measured\n\n\
- Every variant makes the same transfer: transfer number *k* moves one unit between the same two accounts of a pool of 256, chosen pseudo-randomly so concurrent transfers rarely share a document; each variant has its own copy of the pool.\n\
- Variants take turns in small batches (10 transfers sequentially; one batch per variant and concurrency level for throughput), the order rotating by one each round, so drift of the shared machine spreads over all of them. Fawn takes its turns the same way, as batches run by its Node process (per-transfer interleaving across two processes would measure the pipe, not the library).\n\
- Latency: time until the call returned — for (b) at `applied`, with the marker clearing and `done` left in the background (they still run, and count in CPU, commands and throughput); for (b') at `done`; for (a) after all eight steps.\n\
- Throughput: 1, 4 or 16 Tokio tasks (for Fawn, promises) take transfer numbers from a shared counter; wall time until all finished, tandem's background finishing included.\n\
- Writes use `{{ w: \"majority\", j: true }}` everywhere: tandem's default, set on (a) and (e), and in Fawn's connection string.\n\
- No variant sends retryable writes: the Rust client has `retryWrites=false` (every step of tandem and of the tutorial is guarded, so sending one again is harmless), and Fawn's driver predates them. (b'') is (b) with `CoordinatorConfig::finish_delay` at 20 ms: its background finisher holds commits up to 20 ms to clear and finish them together.\n\
- (a) follows the tutorial: insert the record `initial`; `pending`; debit A with `$inc` and `$push` of the marker, guarded by `$ne` on the marker (and `balance >= 1`); credit B likewise; `applied`; `$pull` A's marker; `$pull` B's; `done`. tandem's transfer is the same change: a debit guarded by `balance >= 1`, a credit.\n\n\
## Caveats\n\n\
- SecantusDB is a Python server on the same two cores as the client: absolute latencies and throughputs are dominated by its per-command cost, and under concurrency by its single process. The ratios of commands and round trips carry over to a real MongoDB far better than the milliseconds do.\n\
- tandem's two-phase strategy leaves `done` records and tombstones behind until garbage collection (`RecoveryWorker::collect_garbage` or the TTL index); no collection ran during the benchmark, so its collections grow as a production system's would between collections.\n\
- Fawn runs on Node with its own driver (mongodb 2.2 under mongoose 4.12); its CPU time is the Node process's and is not comparable with the Rust client's.\n\
- The machine is shared: a build running next to the benchmark slows everything; interleaving keeps the comparison fair, not the absolute numbers stable.\n\n\
## Reproduce\n\n\
- `bash scripts/bench.sh` (full) or `bash scripts/bench.sh --quick`: installs SecantusDB and Fawn, starts a server on a free loopback port, runs this benchmark, stops the server, writes `target/bench-report.md`.\n\
- `cargo bench -p tandem-bench`: the criterion micro benchmarks of the embedded store (transfers per second for both commit points, recovery of 10,000 in-flight transactions, bytes per in-flight transaction).\n"
        );
    }
}
