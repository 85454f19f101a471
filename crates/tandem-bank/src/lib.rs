//! The bank test of tandem, in the spirit of Jepsen's bank test.
//!
//! Several worker processes move money between accounts with tandem's
//! two-phase strategy while a nemesis kills workers (SIGKILL), kills and
//! restarts the database server, arms `failCommand` failpoints, pauses
//! workers past their lease (SIGSTOP) and delays writes past the lease.
//! Afterwards everything is stopped, recovery runs
//! until nothing is in flight, and a checker verifies that money was
//! conserved, that every committed transaction applied exactly once, that
//! every canceled one left nothing behind, and that what the workers were told
//! matches the records.
//!
//! ```text
//! cargo run --release -p tandem-bank -- --duration 60s --accounts 8 --workers 4 --seed 1
//! ```
//!
//! The modules: [`bank`] (accounts, ledger, transactions), [`worker`] (the
//! worker process), [`nemesis`] (faults), [`procs`] (child processes),
//! [`outcome_log`] (the workers' logs), [`checker`] (the invariants),
//! [`controller`] (the run), [`args`] (flags), [`rng`] (seeded randomness).
#![warn(missing_docs)]

pub mod args;
pub mod bank;
pub mod checker;
pub mod controller;
pub mod nemesis;
pub mod outcome_log;
pub mod procs;
pub mod rng;
pub mod worker;
