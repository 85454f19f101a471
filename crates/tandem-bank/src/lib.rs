//! The bank test of tandem, in the spirit of Jepsen's bank test.
//!
//! Several worker processes move money with tandem's two-phase strategy
//! while a nemesis kills workers (SIGKILL), kills and restarts either of the
//! two database servers, arms `failCommand` failpoints on either, pauses
//! workers past their lease (SIGSTOP) and delays writes past the lease.
//! Recovery runs in the controller during the run too, every second, racing
//! the live coordinators and the garbage collector.
//! Afterwards everything is stopped, recovery runs until nothing is in
//! flight, and a checker verifies that money was conserved, that every
//! committed transaction applied exactly once, that every canceled one left
//! nothing behind, and that what the workers were told matches the records.
//!
//! What the bank exercises besides plain transfers:
//!
//! * **Two servers.** Customers, the ledger and the records live on server 1
//!   (the coordinator's default store); merchants, the fee account and the
//!   vouchers on server 2 (a named store, [`bank::REMOTE`]). Most transactions
//!   span both.
//! * **Deletes and re-creations of one `_id`.** Vouchers come from a small
//!   pool: an `issue` inserts `voucher-k` (and debits a customer), a `redeem`
//!   deletes it (and credits a merchant), and `voucher-k` is issued again
//!   later. The checker follows each voucher's committed history: it exists
//!   iff its last committed transaction issued it, and it is then exactly the
//!   document that issue inserted, never an earlier issue brought back by a
//!   late insert; no placeholder stands where a committed insert belongs.
//! * **A hot document.** Every transaction pays a fee into the fee account
//!   [`bank::FEES`]; the controller samples its size every 250 ms and at the
//!   end, and its peak must stay within [`bank::hot_bound`] of
//!   [`controller::hot_markers_bound`] markers.
//! * **Concurrent garbage collection** at the smallest age allowed (the lease
//!   plus the clock margin). The checker works without the collected records:
//!   it takes what it needs from the workers' outcome logs, and the money
//!   checks need no record at all.
//!
//! ```text
//! cargo run --release -p tandem-bank -- --duration 60s --accounts 8 --workers 4 --seed 1
//! ```
//!
//! The last line reads `bank: N transfers, C committed, X canceled, F faults,
//! V violations, hot document peak B bytes, G records collected`.
//!
//! The modules: [`bank`] (accounts, vouchers, ledger, transactions), [`worker`]
//! (the worker process), [`nemesis`] (faults), [`procs`] (child processes),
//! [`outcome_log`] (the workers' logs), [`checker`] (the invariants),
//! [`controller`] (the run), [`noting`] (what garbage collection asked for),
//! [`args`] (flags), [`rng`] (seeded randomness).
#![warn(missing_docs)]

pub mod args;
pub mod bank;
pub mod checker;
pub mod controller;
pub mod nemesis;
pub mod noting;
pub mod outcome_log;
pub mod procs;
pub mod rng;
pub mod worker;
