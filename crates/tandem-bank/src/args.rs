//! Command-line flags.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::bank::{DEFAULT_VOUCHERS, MAX_ACCOUNTS, MAX_VOUCHERS};
use crate::nemesis::Nemesis;
use crate::worker::WorkerArgs;

/// The help text.
pub const USAGE: &str = "\
tandem-bank: the bank test of tandem under faults

Runs random transactions from several worker processes while a nemesis kills
workers, kills either database server, arms failCommand failpoints, pauses
workers and delays writes past the lease, while the controller runs recovery
every second; then stops everything, runs recovery until nothing is left in
flight, and checks the bank.

The bank spans two servers: customers, the ledger and the transaction records
on server 1; merchants, the fee account and the vouchers on server 2 (a named
store of the coordinator). Every transaction pays a fee into the fee account,
the hot document all of them touch; its size is sampled every 250 ms and must
stay within a bound: 4 KiB beside its markers, and a marker entry per
transaction that can have one at once (those the workers run, and those
abandoned by killed workers or store errors until recovery finishes them). Merchant 0, the vault, starts at i64::MAX - 200: payments
into it are credits near the limit, refused when they would not fit together
with those pending. Vouchers come from a small pool: an issue inserts voucher-k,
a redeem deletes it, and the same _id is issued again later. Meanwhile the
controller collects the records of finished transactions at the smallest age
allowed (the lease plus the clock margin): records become stubs (id and
state; the bank's ids are caller-chosen) kept for 3 times that age, then go.
The checker relies on the workers' logs for what a stub or a removed record
no longer tells.

The last line reads
  bank: T transfers, C committed, X canceled, F faults, V violations, hot document peak B bytes, G records collected
(T: transactions begun; C and X count records and, for removed records,
ledger entries and what workers were told; B: the fee account's largest
size; G: records garbage collection removed or reduced to stubs, a stub
removed later counting again); the exit status is 0 when V is 0, 1 when it
is not, 2 when the test could not run.

Without MONGODB_URI it starts (and stops) its own two SecantusDB servers from
.venv/bin/secantusd-py (install it with: scripts/db.sh install, or run the
test with: bash scripts/bank.sh). With MONGODB_URI it uses that server for
both stores (two databases) and skips the server-kill nemesis (and the
failpoints, unless the server is on 127.0.0.1).

usage: tandem-bank [flags]

flags:
  --duration D           how long transactions run, e.g. 60s, 2m, 500ms  [60s]
  --accounts N           customer accounts, 2..=10000                    [8]
  --vouchers N           vouchers in the pool, 0..=1000 (0: no vouchers) [4]
  --workers N            worker processes, 1..=64                        [4]
  --tasks N              concurrent transactions per worker, 1..=16      [2]
  --seed S               seed of every random choice                     [from the clock]
  --initial B            initial balance of each customer account        [100]
  --lease D              lease of each transaction                       [2s]
  --nemesis-interval D   mean time between two nemesis rounds            [3s]
  --nemesis LIST         all, none, or a comma-separated list of kill-worker,
                         kill-server, failpoint, pause, slow-write,
                         lose-answer                                     [all]
  --clock-skew D         run server 2 under libfaketime, its clock off from
                         server 1's by an offset drawn from [-D, +D] at every
                         (re)start, so a restart may step it back           [0: off]
  --no-gc                collect no records during the run (the audit, which
                         needs every record, then runs too)
  --work-dir DIR         where the run directory goes                    [system temp dir]
  --keep                 keep the run directory even when the run is clean
  --sabotage             to test the checker: halfway through, add 7 to one
                         balance behind tandem's back; the run must then fail
  --unjournaled          to test the checker: workers write with {w: 1, j: false},
                         so a killed server may lose acknowledged writes
  --secantusd PATH       the server to manage                            [.venv/bin/secantusd-py]
  -h, --help             this help
";

/// The settings of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// How long the workers run transactions.
    pub duration: Duration,
    /// Customer accounts.
    pub accounts: usize,
    /// Vouchers in the pool.
    pub vouchers: usize,
    /// Worker processes.
    pub workers: usize,
    /// Concurrent transactions per worker.
    pub tasks: usize,
    /// The seed.
    pub seed: u64,
    /// Initial balance of each customer.
    pub initial: i64,
    /// The lease of each transaction.
    pub lease: Duration,
    /// Mean time between nemesis rounds.
    pub nemesis_interval: Duration,
    /// The nemeses asked for.
    pub nemeses: BTreeSet<Nemesis>,
    /// Where the run directory goes.
    pub work_dir: PathBuf,
    /// Keep the run directory when the run is clean.
    pub keep: bool,
    /// The server executable to manage, when given explicitly.
    pub secantusd: Option<PathBuf>,
    /// An external server (`MONGODB_URI`), instead of a managed one.
    pub uri: Option<String>,
    /// Halfway through, change one balance outside any transaction (the checks must fail).
    pub sabotage: bool,
    /// Workers write with `{w: 1, j: false}` (unsafe: a killed server may lose acknowledged writes).
    pub unjournaled: bool,
    /// Collect the records of finished transactions during the run.
    pub gc: bool,
    /// Server 2's clock is off by up to this much either way (zero: not skewed).
    pub clock_skew: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            duration: Duration::from_secs(60),
            accounts: 8,
            vouchers: DEFAULT_VOUCHERS,
            workers: 4,
            tasks: 2,
            seed: 0,
            initial: 100,
            lease: Duration::from_secs(2),
            nemesis_interval: Duration::from_secs(3),
            nemeses: Nemesis::ALL.into_iter().collect(),
            work_dir: std::env::temp_dir(),
            keep: false,
            secantusd: None,
            uri: None,
            sabotage: false,
            unjournaled: false,
            gc: true,
            clock_skew: Duration::ZERO,
        }
    }
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invocation {
    /// A bank test.
    Run(Options),
    /// A worker process (started by the controller).
    Worker(WorkerArgs),
    /// Print the help.
    Help,
}

/// Parses a duration: a number with a unit `ms`, `s`, `m` or `h` (seconds when
/// there is none), e.g. `60s`, `1.5s`, `2m`, `250ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("bad duration {text:?} (try 60s, 2m or 500ms)"))?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "" | "s" | "sec" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => return Err(format!("bad duration unit {other:?} in {text:?}")),
    };
    if !seconds.is_finite() || !(0.0..=86_400.0).contains(&seconds) {
        return Err(format!("duration {text:?} out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

fn number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: bad number {value:?}"))
}

fn in_range(flag: &str, v: usize, lo: usize, hi: usize) -> Result<usize, String> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{flag} must be in {lo}..={hi}, got {v}"))
    }
}

/// Parses the arguments after the program name. `uri` is `MONGODB_URI`, if set.
pub fn parse(args: &[String], uri: Option<String>) -> Result<Invocation, String> {
    if args.first().map(String::as_str) == Some("__worker") {
        return WorkerArgs::from_args(&args[1..]).map(Invocation::Worker);
    }
    let mut o = Options {
        uri: uri.filter(|u| !u.trim().is_empty()),
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 % 1_000_000_000)
            .unwrap_or(1),
        ..Options::default()
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = || -> Result<String, String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => it.next().cloned().ok_or(format!("{flag} needs a value")),
            }
        };
        match flag {
            "-h" | "--help" => return Ok(Invocation::Help),
            "--duration" => o.duration = parse_duration(&value()?)?,
            "--accounts" => o.accounts = in_range(flag, number(flag, &value()?)?, 2, MAX_ACCOUNTS)?,
            "--vouchers" => o.vouchers = in_range(flag, number(flag, &value()?)?, 0, MAX_VOUCHERS)?,
            "--workers" => o.workers = in_range(flag, number(flag, &value()?)?, 1, 64)?,
            "--tasks" => o.tasks = in_range(flag, number(flag, &value()?)?, 1, 16)?,
            "--seed" => o.seed = number(flag, &value()?)?,
            "--initial" => {
                o.initial = number(flag, &value()?)?;
                if !(1..=1_000_000_000).contains(&o.initial) {
                    return Err("--initial must be in 1..=1000000000".into());
                }
            }
            "--lease" => {
                o.lease = parse_duration(&value()?)?;
                if o.lease < Duration::from_millis(100) {
                    return Err("--lease must be at least 100ms".into());
                }
            }
            "--nemesis-interval" => {
                o.nemesis_interval = parse_duration(&value()?)?;
                if o.nemesis_interval < Duration::from_millis(100) {
                    return Err("--nemesis-interval must be at least 100ms".into());
                }
            }
            "--nemesis" => o.nemeses = Nemesis::parse_list(&value()?)?,
            "--work-dir" => o.work_dir = PathBuf::from(value()?),
            "--keep" => o.keep = true,
            "--no-gc" => o.gc = false,
            "--clock-skew" => {
                o.clock_skew = parse_duration(&value()?)?;
                if o.clock_skew > Duration::from_secs(3600) {
                    return Err("--clock-skew must be at most 1h".into());
                }
            }
            "--sabotage" => o.sabotage = true,
            "--unjournaled" => o.unjournaled = true,
            "--secantusd" => o.secantusd = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown flag {other:?} (see --help)")),
        }
    }
    Ok(Invocation::Run(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-3s").is_err());
    }

    #[test]
    fn flags() {
        let Invocation::Run(o) = parse(
            &args("--duration 45s --accounts 100 --workers=3 --seed 7 --nemesis pause,failpoint --vouchers 9 --no-gc"),
            Some(" ".into()),
        )
        .unwrap() else {
            panic!("not a run")
        };
        assert_eq!(o.duration, Duration::from_secs(45));
        assert_eq!((o.accounts, o.workers, o.seed), (100, 3, 7));
        assert_eq!((o.vouchers, o.gc), (9, false));
        assert_eq!(
            o.nemeses,
            [Nemesis::Failpoint, Nemesis::Pause].into_iter().collect()
        );
        assert_eq!(o.uri, None);
        assert!(parse(&args("--accounts 10001"), None).is_err());
        assert!(parse(&args("--accounts 1"), None).is_err());
        assert!(parse(&args("--vouchers 1001"), None).is_err());
        assert!(parse(&args("--workers"), None).is_err());
        assert!(parse(&args("--frobnicate"), None).is_err());
        assert_eq!(parse(&args("-h"), None).unwrap(), Invocation::Help);
    }

    #[test]
    fn worker_arguments_round_trip() {
        let w = WorkerArgs {
            uri: "mongodb://127.0.0.1:1/".into(),
            uri2: "mongodb://127.0.0.1:2/".into(),
            db: "bank".into(),
            index: 3,
            incarnation: 2,
            spec: crate::bank::BankSpec::new(8, 100).with_vouchers(3),
            seed: 9,
            log: PathBuf::from("/tmp/x.log"),
            lease: Duration::from_secs(2),
            tasks: 2,
            app_name: "app".into(),
            retries: false,
            unjournaled: true,
        };
        let mut line = vec!["__worker".to_owned()];
        line.extend(w.to_args());
        assert_eq!(parse(&line, None).unwrap(), Invocation::Worker(w));
    }
}
