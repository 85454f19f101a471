//! The workers' append-only outcome logs, and reading them back.
//!
//! Each worker appends one line per event to `worker-<i>.log` (all its
//! incarnations share the file):
//!
//! ```text
//! begin <txid> <kind> <from> <to> <amount> [<issue>]
//! committed <txid>
//! canceled <txid>
//! unknown <txid> <why>
//! ```
//!
//! A line is written with a single `write` call on a file opened for
//! appending, so a worker killed with SIGKILL leaves whole lines behind; a
//! transaction with a `begin` line and no outcome line was in flight when its
//! worker died, and counts as unknown.
//!
//! The `begin` line holds the whole [`Plan`] (a redeem also names the issue it
//! redeems), so the checker knows what each transaction was meant to do even
//! after garbage collection removed its record.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::bank::Plan;

/// What a worker learned about a transaction it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Logged {
    /// `run` returned a receipt: committed.
    Committed,
    /// `run` returned `Canceled`: rolled back.
    Canceled,
    /// Anything else (interrupted, superseded, killed): either outcome is allowed.
    Unknown,
}

impl Logged {
    /// The word in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Logged::Committed => "committed",
            Logged::Canceled => "canceled",
            Logged::Unknown => "unknown",
        }
    }
}

/// A worker's log, for appending.
#[derive(Debug)]
pub struct OutcomeLog {
    file: Mutex<File>,
}

impl OutcomeLog {
    /// Opens (or creates) `path` for appending.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(OutcomeLog {
            file: Mutex::new(file),
        })
    }

    fn write_line(&self, line: String) -> io::Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(line.as_bytes())
    }

    /// Logs the start of a transaction.
    pub fn begin(&self, plan: &Plan) -> io::Result<()> {
        self.write_line(format!("begin {}\n", plan.log_words()))
    }

    /// Logs what a transaction's `run` returned; `why` explains an unknown outcome.
    pub fn outcome(&self, txid: &str, outcome: Logged, why: &str) -> io::Result<()> {
        let line = match outcome {
            Logged::Unknown => {
                let why: String = why
                    .chars()
                    .map(|c| if c.is_whitespace() { '_' } else { c })
                    .take(60)
                    .collect();
                format!("unknown {txid} {why}\n")
            }
            other => format!("{} {txid}\n", other.as_str()),
        };
        self.write_line(line)
    }
}

/// What the logs of a run say, read back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSummary {
    /// Transactions begun.
    pub begun: u64,
    /// The last outcome logged for each transaction (`Unknown` when none was).
    pub outcomes: BTreeMap<String, Logged>,
    /// Lines that could not be read (at most a torn last line per killed worker).
    pub malformed: u64,
    /// Transactions with two different outcomes logged.
    pub contradictory: Vec<String>,
    /// Why outcomes were unknown, from the `unknown` lines (e.g. `superseded`).
    pub unknown_reasons: BTreeMap<String, u64>,
    /// Transactions begun and not answered (yet, or ever: their worker was killed).
    pub unanswered: std::collections::BTreeSet<String>,
    /// What each transaction begun was meant to do, from its `begin` line.
    pub plans: BTreeMap<String, Plan>,
}

impl LogSummary {
    /// How many transactions were logged with `outcome` (begun without outcome count as unknown).
    pub fn count(&self, outcome: Logged) -> u64 {
        self.outcomes.values().filter(|o| **o == outcome).count() as u64
    }

    /// Adds one log line.
    pub fn add_line(&mut self, line: &str) {
        let mut parts = line.split_whitespace();
        let (Some(word), Some(txid)) = (parts.next(), parts.next()) else {
            if !line.trim().is_empty() {
                self.malformed += 1;
            }
            return;
        };
        let outcome = match word {
            "begin" => {
                self.begun += 1;
                let words: Vec<&str> = line.split_whitespace().skip(1).collect();
                match Plan::from_log_words(&words) {
                    Some(plan) => {
                        self.plans.insert(txid.to_owned(), plan);
                    }
                    None => self.malformed += 1,
                }
                self.unanswered.insert(txid.to_owned());
                self.outcomes
                    .entry(txid.to_owned())
                    .or_insert(Logged::Unknown);
                return;
            }
            "committed" => Logged::Committed,
            "canceled" => Logged::Canceled,
            "unknown" => {
                let why = parts.next().unwrap_or("unexplained");
                *self.unknown_reasons.entry(why.to_owned()).or_default() += 1;
                Logged::Unknown
            }
            _ => {
                self.malformed += 1;
                return;
            }
        };
        self.unanswered.remove(txid);
        let slot = self
            .outcomes
            .entry(txid.to_owned())
            .or_insert(Logged::Unknown);
        if *slot != Logged::Unknown && outcome != Logged::Unknown && *slot != outcome {
            self.contradictory.push(txid.to_owned());
        }
        if outcome != Logged::Unknown {
            *slot = outcome;
        }
    }

    /// Adds every line of `text`.
    pub fn add_text(&mut self, text: &str) {
        for line in text.lines() {
            self.add_line(line);
        }
    }
}

/// Follows a set of log files, reading only what was appended since the last call.
#[derive(Debug, Default)]
pub struct LogTail {
    files: BTreeMap<PathBuf, u64>,
    partial: BTreeMap<PathBuf, String>,
    /// Everything read so far.
    pub summary: LogSummary,
}

impl LogTail {
    /// Follows `path` from its start (it need not exist yet).
    pub fn follow(&mut self, path: PathBuf) {
        self.files.entry(path).or_insert(0);
    }

    /// Reads what was appended to every followed file since the last call.
    /// A last line without its newline is kept until it is complete.
    pub fn poll(&mut self) {
        for (path, offset) in self.files.iter_mut() {
            let Ok(mut file) = File::open(path) else {
                continue;
            };
            if file.seek(SeekFrom::Start(*offset)).is_err() {
                continue;
            }
            let mut bytes = Vec::new();
            if file.read_to_end(&mut bytes).is_err() {
                continue;
            }
            *offset += bytes.len() as u64;
            let pending = self.partial.entry(path.clone()).or_default();
            pending.push_str(&String::from_utf8_lossy(&bytes));
            if let Some(end) = pending.rfind('\n') {
                let complete: String = pending.drain(..=end).collect();
                self.summary.add_text(&complete);
            }
        }
    }

    /// Reads the rest, counting unfinished last lines as malformed.
    pub fn finish(&mut self) -> LogSummary {
        self.poll();
        for rest in std::mem::take(&mut self.partial).into_values() {
            if !rest.trim().is_empty() {
                self.summary.malformed += 1;
            }
        }
        self.summary.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bank::Kind;

    fn plan(txid: &str) -> Plan {
        Plan {
            txid: txid.into(),
            kind: Kind::Transfer,
            from: "acct-00000".into(),
            to: "acct-00001".into(),
            amount: 5,
            issue: None,
        }
    }

    #[test]
    fn lines_round_trip_through_a_file() {
        let dir = std::env::temp_dir().join(format!("tandem-bank-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("worker-0.log");
        let _ = std::fs::remove_file(&path);
        let log = OutcomeLog::open(&path).unwrap();
        let mut tail = LogTail::default();
        tail.follow(path.clone());
        log.begin(&plan("a")).unwrap();
        log.outcome("a", Logged::Committed, "").unwrap();
        log.begin(&plan("b")).unwrap();
        tail.poll();
        assert_eq!(tail.summary.begun, 2);
        log.outcome("b", Logged::Unknown, "store went away")
            .unwrap();
        log.begin(&plan("c")).unwrap();
        log.outcome("c", Logged::Canceled, "").unwrap();
        log.begin(&plan("d")).unwrap(); // killed: no outcome
                                        // A torn line, as a kill in the middle of a write would leave.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"commit")
            .unwrap();
        let summary = tail.finish();
        assert_eq!(summary.begun, 4);
        assert_eq!(summary.count(Logged::Committed), 1);
        assert_eq!(summary.count(Logged::Canceled), 1);
        assert_eq!(summary.count(Logged::Unknown), 2);
        assert_eq!(summary.malformed, 1);
        assert!(summary.contradictory.is_empty());
        assert_eq!(summary.unknown_reasons.get("store_went_away"), Some(&1));
        assert_eq!(summary.unanswered.len(), 1);
        assert_eq!(summary.plans.get("c"), Some(&plan("c")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn contradictions_are_noticed() {
        let mut s = LogSummary::default();
        s.add_text("begin x transfer a b 1\ncommitted x\ncanceled x\nbogus\n");
        assert_eq!(s.plans["x"].amount, 1);
        assert_eq!(s.contradictory, vec!["x".to_owned()]);
        assert_eq!(s.malformed, 1);
    }
}
