//! The Markdown report of a run.

use std::fmt::Write as _;
use std::time::Duration;

use crate::proxy::ProxyStats;
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
    /// The latency-injecting proxy every client connected through, if any:
    /// its delay per request, and what it forwarded.
    pub proxy: Option<(Duration, ProxyStats)>,
}

/// The figures of the one-line summary (see [`Summary::line`]); `None` where
/// what they compare was not measured.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Sequential round trips of a two-phase transfer (b) run alone, until the
    /// call returned at its commit point (its applies): commands the client sent
    /// with none of its other commands in flight.
    pub rt_commit: Option<u64>,
    /// Write statements per transfer of (b), as its `MongoStore::metrics()`
    /// counted them over the whole run, background finishing included.
    pub writes_per_transfer: Option<f64>,
    /// Median sequential latency of (b) over that of (c), tandem native.
    pub latency_vs_native: Option<f64>,
    /// Throughput of (b) over Fawn's (d), 16 concurrent.
    pub throughput_vs_fawn_16: Option<f64>,
    /// Throughput of (b) over the hand-written pattern's (a), 16 concurrent.
    pub throughput_vs_handwritten_16: Option<f64>,
    /// Embedded-store two-phase transfers per second on one core (`Applied`).
    pub embedded_2pc_per_s: Option<f64>,
}

impl Summary {
    /// The line scripts parse:
    /// `bench: rt_commit=R writes_per_transfer=W latency_vs_native=L throughput_vs_fawn@16=F throughput_vs_handwritten@16=H embedded_2pc_per_s=E`,
    /// with `na` for a figure that was not measured.
    pub fn line(&self) -> String {
        fn f(v: Option<f64>, digits: usize) -> String {
            v.filter(|x| x.is_finite())
                .map_or_else(|| "na".into(), |x| format!("{x:.digits$}"))
        }
        format!(
            "bench: rt_commit={} writes_per_transfer={} latency_vs_native={} throughput_vs_fawn@16={} throughput_vs_handwritten@16={} embedded_2pc_per_s={}",
            self.rt_commit.map_or_else(|| "na".into(), |r| r.to_string()),
            f(self.writes_per_transfer, 2),
            f(self.latency_vs_native, 2),
            f(self.throughput_vs_fawn_16, 2),
            f(self.throughput_vs_handwritten_16, 2),
            f(self.embedded_2pc_per_s, 0),
        )
    }
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

    /// The figures of the one-line summary, from the measurements of the report.
    pub fn summary(&self) -> Summary {
        let b = self.find(Variant::TandemApplied);
        let ratio = |x: Option<f64>, y: Option<f64>| match (x, y) {
            (Some(x), Some(y)) if y > 0.0 => Some(x / y),
            _ => None,
        };
        let median = |v| {
            self.find(v)
                .filter(|m| !m.latencies.is_empty())
                .map(|m| ms(Row::of(m).latency.median))
        };
        let tps16 = |v| self.find(v).and_then(|m| m.tps(16));
        Summary {
            rt_commit: b.map(|m| m.probe_until_return.waves).filter(|w| *w > 0),
            writes_per_transfer: b.and_then(|m| {
                let done = m.run_transfers.saturating_sub(m.errors);
                let writes = m.run_store_writes?;
                (done > 0).then(|| writes as f64 / done as f64)
            }),
            latency_vs_native: ratio(
                median(Variant::TandemApplied),
                median(Variant::TandemNative),
            ),
            throughput_vs_fawn_16: ratio(tps16(Variant::TandemApplied), tps16(Variant::Fawn)),
            throughput_vs_handwritten_16: ratio(
                tps16(Variant::TandemApplied),
                tps16(Variant::HandWritten),
            ),
            embedded_2pc_per_s: self.embedded.map(|e| e.applied_tps),
        }
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
        self.render_summary(&mut s);
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
        if let Some((delay, p)) = &self.proxy {
            let _ = writeln!(
                s,
                "- network: every client (the Rust variants and Fawn's Node process) connected through a proxy on 127.0.0.1 that holds each chunk a client sends for {:.3} ms before forwarding it (replies go back at once): one simulated network round trip of {:.3} ms per request. It forwarded {} chunks on {} connections and held each, from reading it to having written it on, {:.3} ms at the median, {:.3} ms at the 99th percentile and {:.3} ms on average: beyond the delay, the time its thread waited for a core of the loaded machine",
                ms(*delay),
                ms(*delay),
                p.chunks,
                p.connections,
                ms(p.held_median),
                ms(p.held_p99),
                p.mean_held().map_or(0.0, ms)
            );
        }
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
                | Variant::TandemLate
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
            "Commands/tx: counted on the wire by the driver's command monitoring (in parentheses: `MongoStore::metrics()`, which counts what tandem sends, the native strategy's session commands included, but not the driver's own second attempt of a command). \
Round trips/tx: commands sent while no other command of the client was in flight and answered before the call returned, for one transfer run alone (in parentheses: `Receipt::round_trips`). \
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
            "The performance targets of the protocol's current work, each against this run.\n"
        );
        let _ = writeln!(
            s,
            "| target | measured | ratio | verdict |\n|---|---|---:|---|"
        );
        let summary = self.summary();
        let mut target = |name: &str, measured: String, ratio: f64, met: bool| {
            let _ = writeln!(
                s,
                "| {name} | {measured} | {ratio:.2}× | {} |",
                verdict(met)
            );
        };
        if let Some(rt) = summary.rt_commit {
            target(
                "round trips to the commit point ≤ 2",
                format!("(b) {rt}"),
                rt as f64 / 2.0,
                rt <= 2,
            );
        }
        if let Some(w) = summary.writes_per_transfer {
            target(
                "write statements per transfer ≤ 5, background finishing included",
                format!("(b) {w:.2}"),
                w / 5.0,
                w <= 5.0,
            );
        }
        let row = |v| self.find(v).map(Row::of);
        if let Some(c) = row(Variant::TandemNative) {
            let native = ms(c.latency.median);
            for (variant, name, bound) in [
                (
                    Variant::TandemApplied,
                    "median latency back to back ≤ 1.3× native",
                    1.3,
                ),
                (
                    Variant::TandemAppliedIsolated,
                    "median latency, finishing drained between transfers, ≤ 1.1× native",
                    1.1,
                ),
            ] {
                let Some(b) = row(variant) else { continue };
                let ratio = ms(b.latency.median) / native.max(1e-9);
                target(
                    name,
                    format!("(b) {:.2} ms vs (c) {native:.2} ms", ms(b.latency.median)),
                    ratio,
                    ratio <= bound,
                );
            }
        }
        if let Some(b) = self.find(Variant::TandemApplied) {
            for (other, tag, name, bound) in [
                (Variant::Fawn, "d", "throughput ≥ 2× Fawn's", 2.0),
                (
                    Variant::HandWritten,
                    "a",
                    "throughput ≥ 1.6× the hand-written pattern's",
                    1.6,
                ),
            ] {
                let Some(o) = self.find(other) else { continue };
                for c in &self.levels {
                    if let (Some(tb), Some(to)) = (b.tps(*c), o.tps(*c)) {
                        let ratio = tb / to.max(1e-9);
                        target(
                            &format!("{name}, {c} concurrent"),
                            format!("(b) {tb:.1} vs ({tag}) {to:.1} tx/s"),
                            ratio,
                            ratio >= bound,
                        );
                    }
                }
            }
        }
        if let (Some(a), Some(b)) = (row(Variant::HandWritten), row(Variant::TandemApplied)) {
            let cpu = b.cpu_per_tx.as_secs_f64() / a.cpu_per_tx.as_secs_f64().max(1e-12);
            target(
                "client CPU per transfer ≤ the hand-written pattern's",
                format!(
                    "(b) {:.0} µs vs (a) {:.0} µs",
                    b.cpu_per_tx.as_secs_f64() * 1e6,
                    a.cpu_per_tx.as_secs_f64() * 1e6
                ),
                cpu,
                cpu <= 1.0,
            );
        }
        if let Some(e) = &self.embedded {
            for (name, rate, bound) in [
                (
                    "embedded store, two-phase (`Applied`) ≥ 100,000 transfers/s on one core",
                    e.applied_tps,
                    100_000.0,
                ),
                (
                    "embedded store, native ≥ 250,000 transfers/s on one core",
                    e.native_tps,
                    250_000.0,
                ),
                (
                    "embedded store, ≥ 20,000 in-flight transactions recovered/s",
                    e.recovered_per_sec,
                    20_000.0,
                ),
            ] {
                target(name, format!("{rate:.0} /s"), rate / bound, rate >= bound);
            }
        }
        s.push('\n');
    }

    fn render_summary(&self, s: &mut String) {
        let line = self.summary().line();
        let _ = writeln!(s, "## Summary\n\n`{line}`\n");
        let _ = writeln!(
            s,
            "- `rt_commit`: sequential round trips of one two-phase transfer (b) run alone, until the call returned at its commit point (its applies): commands sent while no other command of the client was in flight and answered before the call returned, counted on the wire.\n\
- `writes_per_transfer`: write statements per transfer of (b) — each insert, update, delete and `findAndModify`, and each statement of an `update` carrying several (both accounts' applies are two) — as its `MongoStore::metrics().write_statements` counted them over the whole run, warm-up and concurrent batches and background finishing included, over the transfers that did not fail.\n\
- `latency_vs_native`: median sequential latency of (b), transfers back to back, over that of (c); below 1 means the two-phase strategy answers sooner.\n\
- `throughput_vs_fawn@16`, `throughput_vs_handwritten@16`: transfers per second of (b) over those of (d) and (a), 16 concurrent.\n\
- `embedded_2pc_per_s`: two-phase transfers per second on the embedded store, one core, `CommitPoint::Applied`.\n\
- `na`: not measured in this run{}.\n",
            match &self.fawn_missing {
                Some(why) => format!(" (Fawn: {why})"),
                None => String::new(),
            }
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_has_na_for_what_was_not_measured() {
        assert_eq!(
            Report::default().summary().line(),
            "bench: rt_commit=na writes_per_transfer=na latency_vs_native=na \
throughput_vs_fawn@16=na throughput_vs_handwritten@16=na embedded_2pc_per_s=na"
        );
        let s = Summary {
            rt_commit: Some(3),
            writes_per_transfer: Some(4.166),
            latency_vs_native: Some(2.0),
            throughput_vs_fawn_16: None,
            throughput_vs_handwritten_16: Some(0.5),
            embedded_2pc_per_s: Some(20_961.4),
        };
        assert_eq!(
            s.line(),
            "bench: rt_commit=3 writes_per_transfer=4.17 latency_vs_native=2.00 \
throughput_vs_fawn@16=na throughput_vs_handwritten@16=0.50 embedded_2pc_per_s=20961"
        );
    }

    #[test]
    fn the_summary_takes_its_ratios_from_the_measurements() {
        let ms = Duration::from_millis;
        let measured = |median: u64, tps16: (u64, Duration)| Measured {
            latencies: vec![ms(median); 3],
            throughput: vec![(16, tps16.0, tps16.1)],
            ..Measured::default()
        };
        let mut b = measured(12, (200, Duration::from_secs(1)));
        b.probe_until_return.waves = 3;
        b.run_transfers = 100;
        b.run_store_writes = Some(450);
        let report = Report {
            variants: vec![
                (
                    Variant::HandWritten,
                    measured(20, (100, Duration::from_secs(1))),
                ),
                (Variant::TandemApplied, b),
                (
                    Variant::TandemNative,
                    measured(6, (400, Duration::from_secs(1))),
                ),
            ],
            ..Report::default()
        };
        let s = report.summary();
        assert_eq!(s.rt_commit, Some(3));
        assert_eq!(s.writes_per_transfer, Some(4.5));
        assert_eq!(s.latency_vs_native, Some(2.0));
        assert_eq!(s.throughput_vs_handwritten_16, Some(2.0));
        assert_eq!(s.throughput_vs_fawn_16, None);
        assert_eq!(s.embedded_2pc_per_s, None);
    }
}
