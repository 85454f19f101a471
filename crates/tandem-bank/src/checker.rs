//! The checker: what must hold once every transaction of a run has finished.
//!
//! [`check`] is a pure function of a [`Snapshot`] (the accounts of both
//! servers, the vouchers, the ledger and the transaction records, read after
//! recovery reached quiescence) and of the workers' logs, so it can be tested
//! on fabricated states. It counts every broken invariant as a [`Violation`]
//! of one [`Check`].
//!
//! Garbage collection runs during the run, so many finished transactions
//! have no full record any more: their record was removed, or reduced to a
//! stub that keeps only its id and state (the bank's transactions have
//! caller-chosen ids, which garbage collection keeps answering for during the
//! idempotency window). The checks that need a record's participants use
//! them when they are there, and otherwise what the workers logged: the plan
//! of each transaction begun (its `begin` line) and what its worker was told.
//! A stub still tells the state. A ledger entry whose record is gone is taken
//! as committed only if a worker began that very transaction; it must then
//! say what the worker planned, and must not belong to a transaction its
//! worker was told was canceled. The money checks
//! (conservation, each balance against the ledger, the fee count, the
//! vouchers) need no record at all: the ledger entry is a participant of its
//! transaction, so it stands and falls with the transaction's other changes.
//!
//! The file is long because it holds one concern only: the invariants of a
//! finished run, one check each, with the tests that feed each of them a
//! fabricated state that breaks it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use bson::{Bson, Document};
use tandem::change::{DEFAULT_MARKER, META_FIELD};
use tandem::{Participant, TxRecord, TxState};

use crate::bank::{read_voucher, BankNs, BankSpec, Home, Kind, Plan, FEE, FEES};
use crate::outcome_log::{LogSummary, Logged};

/// The documents of a bank after a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Every document of `<db>.accounts` on server 1 (the customers).
    pub accounts: Vec<Document>,
    /// Every document of `<db2>.accounts` on server 2 (the merchants and the fee account).
    pub remote_accounts: Vec<Document>,
    /// Every document of `<db2>.vouchers` on server 2, placeholders included.
    pub vouchers: Vec<Document>,
    /// Every document of `<db>.ledger`, undone-insert placeholders included.
    pub ledger: Vec<Document>,
    /// Every document of `<db>.transactions` (those garbage collection left).
    pub records: Vec<Document>,
}

/// One invariant of the bank test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// The sum of all balances and of the live vouchers' amounts equals the money seeded.
    Conservation,
    /// No balance is negative.
    Negative,
    /// Every account exists once, on its own server, with an integer balance,
    /// and no other account exists.
    Accounts,
    /// Every record is readable.
    Unreadable,
    /// Every record is `done` or `canceled`.
    InFlight,
    /// No document keeps an entry in its marker array, a pending count, or
    /// room reserved for a clear or an undo.
    Marker,
    /// No document keeps a `_tandem.lock` (or a `_tandem.deleting` flag).
    Lock,
    /// Every ledger entry is well formed: a plan the bank's workers could make.
    Ledger,
    /// Each balance (and each voucher's amount) equals its initial value plus
    /// the credits minus the debits of the ledger.
    Balance,
    /// Each merchant's `payments` counter equals its payments in the ledger.
    PaymentsCounter,
    /// Each merchant's `lastPayment` names one of its committed payments.
    LastPayment,
    /// The fee account's `count` equals the number of committed transactions:
    /// the hot document took each one's fee exactly once.
    FeeCount,
    /// Each voucher's history holds: every committed redeem took a committed
    /// issue of its voucher, at most once; a voucher exists iff its last
    /// committed transaction issued it, and then it is the very document that
    /// issue inserted (not an older issue resurrected by a late insert).
    Voucher,
    /// No placeholder stands where a committed insert should have put its
    /// document (a ledger entry, a voucher).
    Placeholder,
    /// Every `done` transaction has its ledger entry.
    CommittedMissing,
    /// Every ledger entry belongs to a committed transaction: a `done` record,
    /// or, once its record was collected, a transaction a worker began; and
    /// no more entries lack a record than garbage collection removed.
    Orphan,
    /// No `canceled` transaction left its ledger entry (and so its amounts) behind.
    LostCompensation,
    /// Each ledger entry says what its transaction record (or, once the record
    /// was collected, its worker's plan) says.
    RecordMismatch,
    /// Every transaction a worker saw commit is `done` (or, its record
    /// collected, has its ledger entry).
    AcknowledgedCommit,
    /// Every transaction a worker saw canceled is `canceled` (or, its record
    /// collected, has no ledger entry).
    AcknowledgedCancel,
    /// No transaction was logged with two different outcomes.
    Log,
    /// The hot document ([`FEES`]) never outgrew its bounds: its fields
    /// beside the markers within [`HOT_BASE`](crate::bank::HOT_BASE), its
    /// markers within [`hot_markers_bound`](crate::controller::hot_markers_bound),
    /// and the whole within [`hot_bound`](crate::bank::hot_bound) of those;
    /// checked by the controller on its samples.
    HotDocument,
    /// `tandem::testing::audit` found nothing (a cross-check run on the live
    /// store, when no record was collected).
    Audit,
}

impl Check {
    /// Every check, in the order they are reported.
    pub const ALL: [Check; 23] = [
        Check::Conservation,
        Check::Negative,
        Check::Accounts,
        Check::Unreadable,
        Check::InFlight,
        Check::Marker,
        Check::Lock,
        Check::Ledger,
        Check::Balance,
        Check::PaymentsCounter,
        Check::LastPayment,
        Check::FeeCount,
        Check::Voucher,
        Check::Placeholder,
        Check::CommittedMissing,
        Check::Orphan,
        Check::LostCompensation,
        Check::RecordMismatch,
        Check::AcknowledgedCommit,
        Check::AcknowledgedCancel,
        Check::Log,
        Check::HotDocument,
        Check::Audit,
    ];

    /// A short name, as printed.
    pub fn name(self) -> &'static str {
        match self {
            Check::Conservation => "conservation",
            Check::Negative => "negative-balance",
            Check::Accounts => "accounts",
            Check::Unreadable => "unreadable-record",
            Check::InFlight => "in-flight-record",
            Check::Marker => "marker-left",
            Check::Lock => "lock-left",
            Check::Ledger => "malformed-ledger",
            Check::Balance => "balance",
            Check::PaymentsCounter => "payments-counter",
            Check::LastPayment => "last-payment",
            Check::FeeCount => "fee-count",
            Check::Voucher => "voucher-history",
            Check::Placeholder => "placeholder-left",
            Check::CommittedMissing => "committed-not-applied",
            Check::Orphan => "ledger-without-commit",
            Check::LostCompensation => "compensation-lost",
            Check::RecordMismatch => "record-ledger-mismatch",
            Check::AcknowledgedCommit => "acknowledged-commit-lost",
            Check::AcknowledgedCancel => "acknowledged-cancel-broken",
            Check::Log => "contradictory-log",
            Check::HotDocument => "hot-document-size",
            Check::Audit => "audit",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub check: Check,
    /// What exactly was found.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.check, self.detail)
    }
}

/// What the vouchers went through, as the ledger tells.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VoucherStats {
    /// Committed issues.
    pub issued: u64,
    /// Committed redeems.
    pub redeemed: u64,
    /// Vouchers alive at the end.
    pub live: u64,
    /// Voucher ids issued more than once (so deleted and created again).
    pub reissued: u64,
    /// Placeholders in the vouchers collection (reserved `_id`s nobody filled).
    pub placeholders: u64,
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Every broken invariant.
    pub violations: Vec<Violation>,
    /// Committed transactions: records `done`, plus ledger entries whose
    /// record was collected ([`unrecorded_committed`](Self::unrecorded_committed)).
    pub committed: u64,
    /// Canceled transactions: records `canceled`, plus transactions their
    /// worker saw canceled whose record is gone ([`unrecorded_canceled`](Self::unrecorded_canceled)).
    pub canceled: u64,
    /// Records `done`.
    pub done_records: u64,
    /// Records `canceled`.
    pub canceled_records: u64,
    /// Records in any other state.
    pub in_flight: u64,
    /// Records (counted in `done_records` and `canceled_records`) that
    /// garbage collection reduced to stubs: state and id, no participants.
    pub stub_records: u64,
    /// Ledger entries whose record is a `done` stub (checked against their
    /// worker's plan instead of the record).
    pub stubbed_committed: u64,
    /// Ledger entries of transactions whose record is gone (collected).
    pub unrecorded_committed: u64,
    /// The ids of the records that are stubs, and of the transactions
    /// whose ledger entry has no record: what only garbage collection may
    /// have done ([`check_collected`]).
    pub collected_ids: BTreeSet<String>,
    /// Transactions their worker saw canceled, with no record (collected, or
    /// refused before their record was written) and no ledger entry.
    pub unrecorded_canceled: u64,
    /// Ledger documents that are entries (not undone-insert placeholders).
    pub ledger_entries: u64,
    /// Undone-insert placeholders in the ledger.
    pub ghosts: u64,
    /// The sum of all balances and of the live vouchers' amounts.
    pub total: i128,
    /// The fee account's `count`.
    pub fee_count: i64,
    /// The vault's balance ([`VAULT`](crate::bank::VAULT), near `i64::MAX`).
    pub vault_balance: i64,
    /// Committed transactions that credited the vault.
    pub vault_credits: u64,
    /// The vouchers' story.
    pub vouchers: VoucherStats,
    /// Why the `canceled` records were canceled (see [`cancel_cause`]), counted.
    pub cancel_causes: BTreeMap<&'static str, u64>,
}

/// Classifies the `lastError` of a canceled record: `guard` (a balance too low),
/// `conflict` (a document held by another transaction), `recovery` (rolled back
/// by recovery after its lease ended), `store` (a store error while applying),
/// `fenced`, `expired` (an apply past its deadline), `overflow` (a credit to
/// the vault that would not fit with those pending), `exists` (a voucher
/// issued over a live one), `not-found`, or `other`.
pub fn cancel_cause(last_error: Option<&str>) -> &'static str {
    let Some(e) = last_error else {
        return "other";
    };
    if e.contains("guard failed") {
        "guard"
    } else if e.contains("conflict with transaction") {
        "conflict"
    } else if e.contains("rolled back by recovery") {
        "recovery"
    } else if e.contains("store error") {
        "store"
    } else if e.contains("fenced") {
        "fenced"
    } else if e.contains("deadline of the apply has passed") {
        "expired"
    } else if e.contains("would overflow") {
        "overflow"
    } else if e.contains("already exists") {
        "exists"
    } else if e.contains("not found") {
        "not-found"
    } else {
        "other"
    }
}

impl Report {
    /// How many violations of `check` were found.
    pub fn count(&self, check: Check) -> usize {
        self.violations.iter().filter(|v| v.check == check).count()
    }

    /// Violations per check, for the checks that have any.
    pub fn by_check(&self) -> BTreeMap<Check, usize> {
        let mut map = BTreeMap::new();
        for v in &self.violations {
            *map.entry(v.check).or_default() += 1;
        }
        map
    }

    /// Records a broken invariant.
    pub fn add(&mut self, check: Check, detail: impl Into<String>) {
        self.violations.push(Violation {
            check,
            detail: detail.into(),
        });
    }
}

/// Compares, record by record, what the checker found collected with what
/// garbage collection asked for (`sent`: the ids its removals and stub
/// writes named, noted before they were sent): every committed transaction
/// had a full record, and only garbage collection removes one or makes it a
/// stub, so each stub, and each ledger entry without a record, must be
/// among them. (A count of what it reported would fall short of what it
/// did whenever an answer was lost.)
pub fn check_collected(report: &mut Report, sent: &BTreeSet<String>) {
    let unasked: Vec<&String> = report
        .collected_ids
        .iter()
        .filter(|id| !sent.contains(*id))
        .collect();
    if let Some(first) = unasked.first() {
        report.add(
            Check::Orphan,
            format!(
                "{} record(s) are gone or stubs though garbage collection never asked to collect them ({} ledger entries have no record, {} records are stubs); the first: {first}",
                unasked.len(),
                report.unrecorded_committed,
                report.stub_records
            ),
        );
    }
}

/// Whether a record document is a stub garbage collection left: it has
/// `stubUntil`, or neither participants nor history (a stub written before
/// stubs kept their end). A transaction refused before its record was
/// written keeps its id with a `canceled` record of no participants, but
/// with the history line that says so: it is no stub.
fn is_stub(doc: &Document, record: &TxRecord) -> bool {
    doc.contains_key("stubUntil") || (record.participants.is_empty() && record.history.is_empty())
}

fn id_text(doc: &Document) -> String {
    match doc.get("_id") {
        Some(Bson::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "(no _id)".into(),
    }
}

fn integer(b: Option<&Bson>) -> Option<i64> {
    match b {
        Some(Bson::Int64(i)) => Some(*i),
        Some(Bson::Int32(i)) => Some(i64::from(*i)),
        _ => None,
    }
}

fn is_ghost(doc: &Document) -> bool {
    doc.get_document(META_FIELD)
        .ok()
        .and_then(|m| m.get("ghost"))
        .is_some_and(|g| *g != Bson::Null && *g != Bson::Boolean(false))
}

/// How the checker refers to the transactions named on documents.
struct Fate<'a> {
    records: &'a BTreeMap<String, TxRecord>,
    logs: Option<&'a LogSummary>,
}

impl Fate<'_> {
    /// `txid (done)`, `txid (canceled)`, `txid (no record; its worker was told committed)`, …
    fn of(&self, txid: &Bson) -> String {
        // Markers and locks hold the id tagged with the record's token.
        let txid = match txid {
            Bson::String(s) => tandem::TxId::of_marker(s).to_owned(),
            other => other.to_string(),
        };
        let fate = match self.records.get(&txid) {
            Some(r) => r.state.to_string(),
            None => match self.logs.and_then(|l| l.outcomes.get(&txid)) {
                Some(told) => format!("no record; its worker was told {}", told.as_str()),
                None => "no record, never begun".to_owned(),
            },
        };
        format!("{txid} ({fate})")
    }
}

/// The marker and lock checks of one document: no transaction, finished as
/// they all are now, may keep it marked, locked, counted pending or being deleted.
fn check_leftovers(report: &mut Report, fate: &Fate<'_>, what: &str, doc: &Document) {
    let id = id_text(doc);
    if let Some(Bson::Array(list)) = doc.get(DEFAULT_MARKER) {
        if !list.is_empty() {
            let named: Vec<String> = list.iter().map(|t| fate.of(t)).collect();
            report.add(
                Check::Marker,
                format!("{what}/{id} keeps markers of {}", named.join(", ")),
            );
        }
    }
    let meta = doc.get_document(META_FIELD).ok();
    let lock = meta
        .and_then(|m| m.get("lock"))
        .filter(|l| **l != Bson::Null);
    if let Some(lock) = lock {
        report.add(
            Check::Lock,
            format!("{what}/{id} keeps the lock of {}", fate.of(lock)),
        );
    }
    if meta.is_some_and(|m| m.contains_key("deleting")) {
        report.add(
            Check::Lock,
            format!("{what}/{id} keeps a pending delete (_tandem.deleting)"),
        );
    }
    let pending = integer(meta.and_then(|m| m.get("pending"))).unwrap_or(0);
    if pending != 0 {
        report.add(
            Check::Marker,
            format!("{what}/{id} counts {pending} pending transaction(s)"),
        );
    }
    // Every clear and undo gives back the room its apply reserved.
    let room = integer(meta.and_then(|m| m.get("room"))).unwrap_or(0);
    if room != 0 {
        report.add(
            Check::Marker,
            format!("{what}/{id} keeps {room} bytes of room reserved (_tandem.room)"),
        );
    }
}

/// Whether `record` holds exactly the participants `plan` makes.
fn compare_with_record(record: &TxRecord, plan: &Plan, ns: &BankNs) -> Result<(), String> {
    let expected: Vec<Document> = plan
        .changes(ns)
        .iter()
        .map(Participant::spec)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the ledger's plan does not make a transaction: {e}"))?;
    let recorded: Vec<&Document> = record.participants.iter().map(|p| &p.spec).collect();
    if recorded.len() != expected.len() {
        return Err(format!(
            "the record has {} participants, the ledger entry ({} {} from {} to {}) makes {}",
            recorded.len(),
            plan.kind,
            plan.amount,
            plan.from,
            plan.to,
            expected.len()
        ));
    }
    for (i, (got, want)) in recorded.iter().zip(&expected).enumerate() {
        if *got != want {
            return Err(format!(
                "participant {i} ({}) is recorded as {got}, the ledger entry makes {want}",
                record.participants[i].label
            ));
        }
    }
    Ok(())
}

/// A live voucher, read.
struct LiveVoucher {
    issue: String,
    amount: i64,
    from: String,
}

/// The fields a voucher document may have: what its issue wrote, and tandem's own.
const VOUCHER_FIELDS: [&str; 6] = ["_id", "amount", "issue", "from", DEFAULT_MARKER, META_FIELD];

/// Checks a bank after a run. `logs`, when given, are compared with the
/// records, and stand in for the records garbage collection removed.
pub fn check(spec: &BankSpec, ns: &BankNs, snap: &Snapshot, logs: Option<&LogSummary>) -> Report {
    let mut report = Report::default();

    // Records: readable and finished.
    let mut records: BTreeMap<String, TxRecord> = BTreeMap::new();
    let mut stubs: BTreeSet<String> = BTreeSet::new();
    for doc in &snap.records {
        match TxRecord::from_document(doc.clone()) {
            Ok(r) => {
                if is_stub(doc, &r) {
                    report.stub_records += 1;
                    report.collected_ids.insert(r.id.as_str().to_owned());
                    stubs.insert(r.id.as_str().to_owned());
                    if !r.state.is_terminal() {
                        report.add(
                            Check::InFlight,
                            format!("transaction {} is a stub, yet {}", r.id, r.state),
                        );
                    }
                }
                match r.state {
                    TxState::Done => report.done_records += 1,
                    TxState::Canceled => {
                        report.canceled_records += 1;
                        *report
                            .cancel_causes
                            .entry(cancel_cause(r.last_error.as_deref()))
                            .or_default() += 1;
                    }
                    state => {
                        report.in_flight += 1;
                        report.add(
                            Check::InFlight,
                            format!("transaction {} left {state}", r.id),
                        );
                    }
                }
                records.insert(r.id.as_str().to_owned(), r);
            }
            Err(e) => report.add(Check::Unreadable, format!("record {}: {e}", id_text(doc))),
        }
    }
    let state_of = |txid: &str| records.get(txid).map(|r| r.state);
    let fate = Fate {
        records: &records,
        logs,
    };

    // Accounts: each one present once on its own server, integer balances,
    // none negative, nothing left behind.
    let mut balances: BTreeMap<String, i64> = BTreeMap::new();
    let mut merchants: BTreeMap<String, &Document> = BTreeMap::new();
    let mut fees: Option<&Document> = None;
    for (home, docs, server) in [
        (Home::Local, &snap.accounts, "server 1"),
        (Home::Remote, &snap.remote_accounts, "server 2"),
    ] {
        let what = ns.accounts_of(home).to_string();
        for doc in docs {
            let id = id_text(doc);
            check_leftovers(&mut report, &fate, &what, doc);
            match spec.home(&id) {
                None => {
                    report.add(Check::Accounts, format!("unexpected account {what}/{id}"));
                    continue;
                }
                Some(h) if h != home => {
                    report.add(
                        Check::Accounts,
                        format!("account {id} is on {server}, it belongs on the other"),
                    );
                    continue;
                }
                Some(_) => {}
            }
            let Some(balance) = integer(doc.get("balance")) else {
                report.add(
                    Check::Accounts,
                    format!("{id} has no integer balance: {:?}", doc.get("balance")),
                );
                continue;
            };
            if balance < 0 {
                report.add(Check::Negative, format!("{id} has balance {balance}"));
            }
            if balances.insert(id.clone(), balance).is_some() {
                report.add(Check::Accounts, format!("account {id} appears twice"));
            }
            if spec.is_merchant(&id) {
                merchants.insert(id, doc);
            } else if id == FEES {
                fees = Some(doc);
            }
        }
    }
    for id in spec.account_ids() {
        if !balances.contains_key(&id) {
            report.add(Check::Accounts, format!("account {id} is missing"));
        }
    }

    // Vouchers: filled ones are live, placeholders are nobody's.
    let what = ns.vouchers().to_string();
    let mut vouchers: BTreeMap<String, LiveVoucher> = BTreeMap::new();
    let mut voucher_ghosts: BTreeSet<String> = BTreeSet::new();
    for doc in &snap.vouchers {
        let id = id_text(doc);
        check_leftovers(&mut report, &fate, &what, doc);
        if !spec.is_voucher(&id) {
            report.add(Check::Voucher, format!("unexpected voucher {what}/{id}"));
        }
        if is_ghost(doc) {
            report.vouchers.placeholders += 1;
            voucher_ghosts.insert(id);
            continue;
        }
        let Some((issue, amount, from)) = read_voucher(doc) else {
            report.add(
                Check::Voucher,
                format!("{what}/{id} is not a voucher: {doc}"),
            );
            continue;
        };
        let extra: Vec<&str> = doc
            .keys()
            .map(String::as_str)
            .filter(|k| !VOUCHER_FIELDS.contains(k))
            .collect();
        if !extra.is_empty() {
            report.add(
                Check::Voucher,
                format!(
                    "{what}/{id} (issued by {issue}) has fields {extra:?} its issue did not write: not a fresh document"
                ),
            );
        }
        vouchers.insert(
            id,
            LiveVoucher {
                issue,
                amount,
                from,
            },
        );
    }

    // The ledger: its live entries are exactly the committed transactions.
    let what = ns.ledger().to_string();
    let mut delta: BTreeMap<String, i64> = BTreeMap::new();
    let mut payments: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut live: BTreeMap<String, Plan> = BTreeMap::new();
    let mut ledger_ghosts: BTreeSet<String> = BTreeSet::new();
    for doc in &snap.ledger {
        let txid = id_text(doc);
        check_leftovers(&mut report, &fate, &what, doc);
        if is_ghost(doc) {
            report.ghosts += 1;
            ledger_ghosts.insert(txid);
            continue;
        }
        report.ledger_entries += 1;
        let plan = match Plan::from_entry(&txid, doc).and_then(|p| p.validate(spec).map(|()| p)) {
            Ok(p) => p,
            Err(why) => {
                report.add(Check::Ledger, format!("{what}/{txid}: {why}"));
                continue;
            }
        };
        match state_of(&txid) {
            Some(TxState::Done) if !stubs.contains(&txid) => {
                if let Err(why) = compare_with_record(&records[&txid], &plan, ns) {
                    report.add(Check::RecordMismatch, format!("{txid}: {why}"));
                }
            }
            Some(TxState::Done) => {
                report.stubbed_committed += 1;
                match logs.map(|l| l.plans.get(&txid)) {
                    Some(Some(planned)) if *planned != plan => report.add(
                        Check::RecordMismatch,
                        format!(
                            "{txid} (record a stub): its worker planned {planned:?}, the ledger says {plan:?}"
                        ),
                    ),
                    Some(None) => report.add(
                        Check::RecordMismatch,
                        format!("{txid}: its record is a stub, and no worker began it"),
                    ),
                    _ => {}
                }
            }
            Some(TxState::Canceled) => report.add(
                Check::LostCompensation,
                format!(
                    "{txid} is canceled but its ledger entry stayed ({} {} from {} to {})",
                    plan.kind, plan.amount, plan.from, plan.to
                ),
            ),
            Some(state) => report.add(
                Check::Orphan,
                format!("ledger entry {txid} belongs to a transaction left {state}"),
            ),
            None => match logs.map(|l| l.plans.get(&txid)) {
                Some(Some(planned)) => {
                    report.unrecorded_committed += 1;
                    report.collected_ids.insert(txid.clone());
                    if *planned != plan {
                        report.add(
                            Check::RecordMismatch,
                            format!(
                                "{txid} (record collected): its worker planned {planned:?}, the ledger says {plan:?}"
                            ),
                        );
                    }
                }
                Some(None) => report.add(
                    Check::Orphan,
                    format!(
                        "ledger entry {txid} has no transaction record, and no worker began it"
                    ),
                ),
                None => report.add(
                    Check::Orphan,
                    format!("ledger entry {txid} has no transaction record"),
                ),
            },
        }
        *delta.entry(plan.from.clone()).or_default() -= plan.amount;
        *delta.entry(plan.to.clone()).or_default() += plan.credit();
        if plan.to == crate::bank::VAULT {
            report.vault_credits += 1;
        }
        *delta.entry(FEES.to_owned()).or_default() += FEE;
        if plan.kind == Kind::Payment {
            payments
                .entry(plan.to.clone())
                .or_default()
                .insert(txid.clone());
        }
        live.insert(txid, plan);
    }
    for (txid, r) in &records {
        if r.state == TxState::Done && !live.contains_key(txid) {
            if ledger_ghosts.contains(txid) {
                report.add(
                    Check::Placeholder,
                    format!("{txid} is done, but its ledger entry is still a placeholder"),
                );
            } else {
                report.add(
                    Check::CommittedMissing,
                    format!("{txid} is done but has no ledger entry"),
                );
            }
        }
    }

    // Every committed transaction applied exactly once, every canceled one not at all.
    report.vault_balance = balances
        .get(crate::bank::VAULT)
        .copied()
        .unwrap_or_default();
    for (id, balance) in &balances {
        let initial = i128::from(spec.initial_balance(id).unwrap_or(0));
        let moved = i128::from(delta.get(id).copied().unwrap_or(0));
        let balance = i128::from(*balance);
        if balance != initial + moved {
            report.add(
                Check::Balance,
                format!(
                    "{id} has {balance}, expected {} (initial {initial}, ledger {moved:+}): off by {:+}",
                    initial + moved,
                    balance - initial - moved
                ),
            );
        }
    }
    let pool: BTreeSet<String> = (0..spec.vouchers)
        .map(BankSpec::voucher)
        .chain(vouchers.keys().cloned())
        .collect();
    for id in &pool {
        let held = vouchers.get(id).map_or(0, |v| v.amount);
        let moved = delta.get(id).copied().unwrap_or(0);
        if held != moved {
            report.add(
                Check::Balance,
                format!(
                    "{id} holds {held}, the ledger leaves {moved} in it: off by {:+}",
                    held - moved
                ),
            );
        }
    }
    report.total = balances.values().map(|&b| i128::from(b)).sum::<i128>()
        + vouchers
            .values()
            .map(|v| i128::from(v.amount))
            .sum::<i128>();
    if report.total != spec.total() {
        report.add(
            Check::Conservation,
            format!(
                "balances and vouchers sum to {}, the bank was seeded with {}",
                report.total,
                spec.total()
            ),
        );
    }
    for (id, doc) in &merchants {
        let paid = payments.get(id.as_str());
        let count = paid.map_or(0, |p| p.len() as i64);
        match integer(doc.get("payments")) {
            Some(n) if n == count => {}
            other => report.add(
                Check::PaymentsCounter,
                format!("{id} counts {other:?} payments, the ledger has {count}"),
            ),
        }
        match doc.get("lastPayment") {
            None if count == 0 => {}
            Some(Bson::String(last)) if paid.is_some_and(|p| p.contains(last)) => {}
            other => report.add(
                Check::LastPayment,
                format!(
                    "{id} has lastPayment {other:?}, which is not one of its {count} committed payments"
                ),
            ),
        }
    }
    if let Some(fees) = fees {
        report.fee_count = integer(fees.get("count")).unwrap_or(-1);
        if report.fee_count != live.len() as i64 {
            report.add(
                Check::FeeCount,
                format!(
                    "{FEES} counts {:?} transactions, the ledger has {}",
                    fees.get("count"),
                    live.len()
                ),
            );
        }
    }

    check_vouchers(&mut report, &pool, &live, &vouchers, &voucher_ghosts, &fate);

    // What the workers were told.
    if let Some(logs) = logs {
        for (txid, outcome) in &logs.outcomes {
            let state = state_of(txid);
            let entry = live.contains_key(txid);
            match (outcome, state) {
                (Logged::Committed, Some(TxState::Done)) | (Logged::Canceled, Some(TxState::Canceled)) => {}
                (Logged::Committed, None) if entry => {}
                (Logged::Committed, None) => report.add(
                    Check::AcknowledgedCommit,
                    format!("{txid} was reported committed, and has neither a record nor a ledger entry"),
                ),
                (Logged::Committed, Some(state)) => report.add(
                    Check::AcknowledgedCommit,
                    format!("{txid} was reported committed, its record is {state}"),
                ),
                (Logged::Canceled, None) if entry => report.add(
                    Check::AcknowledgedCancel,
                    format!("{txid} was reported canceled, its record is gone and its ledger entry stayed"),
                ),
                (Logged::Canceled, None) => report.unrecorded_canceled += 1,
                (Logged::Canceled, Some(state)) => report.add(
                    Check::AcknowledgedCancel,
                    format!("{txid} was reported canceled, its record is {state}"),
                ),
                (Logged::Unknown, _) => {}
            }
        }
        for txid in &logs.contradictory {
            report.add(
                Check::Log,
                format!("{txid} was logged both committed and canceled"),
            );
        }
    }
    report.committed = report.done_records + report.unrecorded_committed;
    report.canceled = report.canceled_records + report.unrecorded_canceled;
    report
}

/// The vouchers' histories, from the committed issues and redeems in the ledger.
fn check_vouchers(
    report: &mut Report,
    pool: &BTreeSet<String>,
    live: &BTreeMap<String, Plan>,
    vouchers: &BTreeMap<String, LiveVoucher>,
    ghosts: &BTreeSet<String>,
    fate: &Fate<'_>,
) {
    let mut issues: BTreeMap<&str, BTreeMap<&str, &Plan>> = BTreeMap::new();
    let mut redeems: BTreeMap<&str, Vec<&Plan>> = BTreeMap::new();
    for plan in live.values() {
        match plan.kind {
            Kind::Issue => {
                issues
                    .entry(plan.to.as_str())
                    .or_default()
                    .insert(plan.txid.as_str(), plan);
            }
            Kind::Redeem => redeems.entry(plan.from.as_str()).or_default().push(plan),
            _ => {}
        }
    }
    let none = BTreeMap::new();
    for id in pool {
        let issued = issues.get(id.as_str()).unwrap_or(&none);
        let redeemed = redeems.get(id.as_str()).map_or(&[][..], Vec::as_slice);
        report.vouchers.issued += issued.len() as u64;
        report.vouchers.redeemed += redeemed.len() as u64;
        if issued.len() > 1 {
            report.vouchers.reissued += 1;
        }
        // Each committed redeem took one committed issue of this voucher, whole, once.
        let mut redeemed_by: BTreeMap<&str, &str> = BTreeMap::new();
        for r in redeemed {
            let issue = r.issue.as_deref().unwrap_or("");
            let Some(i) = issued.get(issue) else {
                report.add(
                    Check::Voucher,
                    format!(
                        "redeem {} of {id} took the voucher of {}, which is not a committed issue of {id}",
                        r.txid,
                        fate.of(&Bson::String(issue.to_owned()))
                    ),
                );
                continue;
            };
            if i.credit() != r.amount {
                report.add(
                    Check::Voucher,
                    format!(
                        "redeem {} of {id} took {}, issue {issue} put {} in it",
                        r.txid,
                        r.amount,
                        i.credit()
                    ),
                );
            }
            if let Some(first) = redeemed_by.insert(issue, &r.txid) {
                report.add(
                    Check::Voucher,
                    format!(
                        "{id} of issue {issue} was redeemed twice: by {first} and {}",
                        r.txid
                    ),
                );
            }
        }
        let open: Vec<&Plan> = issued
            .values()
            .filter(|i| !redeemed_by.contains_key(i.txid.as_str()))
            .copied()
            .collect();
        if open.len() > 1 {
            let names: Vec<&str> = open.iter().map(|i| i.txid.as_str()).collect();
            report.add(
                Check::Voucher,
                format!(
                    "{id} has {} committed issues that nothing redeemed ({}): an insert went over a live voucher",
                    open.len(),
                    names.join(", ")
                ),
            );
        }
        match (vouchers.get(id), open.as_slice()) {
            (Some(v), [i]) => {
                report.vouchers.live += 1;
                if v.issue != i.txid || v.amount != i.credit() || v.from != i.from {
                    report.add(
                        Check::Voucher,
                        format!(
                            "{id} holds issue {} ({} from {}), but its open committed issue is {} ({} from {}): not the document that issue inserted",
                            v.issue,
                            v.amount,
                            v.from,
                            i.txid,
                            i.credit(),
                            i.from
                        ),
                    );
                }
            }
            (Some(v), []) => {
                report.vouchers.live += 1;
                let why = match redeemed_by.get(v.issue.as_str()) {
                    Some(r) => format!("which {r} redeemed: resurrected by a late insert"),
                    None if issued.contains_key(v.issue.as_str()) => "a committed issue".to_owned(),
                    None => "which did not commit".to_owned(),
                };
                report.add(
                    Check::Voucher,
                    format!(
                        "{id} exists with issue {}, {why}; no committed transaction left it issued",
                        fate.of(&Bson::String(v.issue.clone()))
                    ),
                );
            }
            (Some(_), _) => report.vouchers.live += 1,
            (None, [i]) if ghosts.contains(id) => report.add(
                Check::Placeholder,
                format!(
                    "{id} is a placeholder, but {} issued it and nothing redeemed it",
                    i.txid
                ),
            ),
            (None, [i]) => report.add(
                Check::Voucher,
                format!(
                    "{id} is missing, but {} issued it and nothing redeemed it",
                    i.txid
                ),
            ),
            (None, _) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn ns() -> BankNs {
        BankNs::new("bank")
    }

    /// A record document as tandem writes it (the fields the checker reads;
    /// `TxRecord` gives the others their defaults).
    fn record(plan: &Plan, state: TxState) -> Document {
        let participants: Vec<Bson> = plan
            .changes(&ns())
            .into_iter()
            .map(|c| {
                Bson::Document(doc! {
                    "kind": "document",
                    "label": c.label(),
                    "spec": Participant::spec(&c).unwrap(),
                })
            })
            .collect();
        let record = doc! {
            "_id": plan.txid.as_str(),
            "state": state,
            "participants": participants,
            "owner": "test",
            "epoch": 1_i64,
            "leaseMillis": 2000_i64,
        };
        TxRecord::from_document(record.clone()).expect("a readable record");
        record
    }

    /// Reduces the record of `txid` to the stub garbage collection leaves.
    fn stub(snap: &mut Snapshot, txid: &str) {
        let r = snap
            .records
            .iter_mut()
            .find(|d| d.get_str("_id") == Ok(txid))
            .unwrap();
        r.insert("participants", Bson::Array(vec![]));
        r.insert("history", Bson::Array(vec![]));
        r.insert("stubUntil", bson::DateTime::from_millis(1 << 45));
    }

    fn account<'a>(snap: &'a mut Snapshot, id: &str) -> &'a mut Document {
        snap.accounts
            .iter_mut()
            .chain(snap.remote_accounts.iter_mut())
            .find(|d| d.get_str("_id") == Ok(id))
            .unwrap()
    }

    fn add(doc: &mut Document, field: &str, by: i64) {
        let now = integer(doc.get(field)).unwrap_or(0);
        doc.insert(field, now + by);
    }

    /// Moves money in or out of an account or a voucher.
    fn shift(snap: &mut Snapshot, id: &str, by: i64) {
        if id.starts_with("voucher-") {
            let v = snap
                .vouchers
                .iter_mut()
                .find(|d| d.get_str("_id") == Ok(id))
                .unwrap();
            add(v, "amount", by);
        } else {
            add(account(snap, id), "balance", by);
        }
    }

    /// Applies a committed plan to `snap` exactly as a correct run would.
    fn apply(snap: &mut Snapshot, plan: &Plan) {
        effects(snap, plan, true);
    }

    /// Applies a committed plan, its voucher documents too if `vouchers`.
    fn effects(snap: &mut Snapshot, plan: &Plan, vouchers: bool) {
        if plan.kind == Kind::Redeem {
            if vouchers {
                snap.vouchers.retain(|d| d.get_str("_id") != Ok(&plan.from));
            }
        } else {
            shift(snap, &plan.from, -plan.amount);
        }
        if plan.kind == Kind::Issue {
            if vouchers {
                snap.vouchers.push(doc! {
                    "_id": &plan.to,
                    "amount": plan.credit(),
                    "issue": &plan.txid,
                    "from": &plan.from,
                    "pendingTransactions": [],
                    META_FIELD: { "pending": 0 },
                });
            }
        } else {
            shift(snap, &plan.to, plan.credit());
        }
        let fees = account(snap, FEES);
        add(fees, "balance", FEE);
        add(fees, "count", 1);
        if plan.kind == Kind::Payment {
            let to = account(snap, &plan.to);
            add(to, "payments", 1);
            to.insert("lastPayment", plan.txid.as_str());
        }
        let mut entry = doc! { "_id": plan.txid.as_str() };
        entry.extend(plan.ledger_entry());
        entry.insert("pendingTransactions", Bson::Array(vec![]));
        entry.insert(META_FIELD, doc! { "pending": 0 });
        snap.ledger.push(entry);
    }

    /// A bank of 3 customers after `plans` ran in order, each committed (`true`)
    /// or canceled, in the exact state a correct run leaves.
    fn bank(plans: &[(Plan, bool)]) -> (BankSpec, Snapshot) {
        let spec = BankSpec::new(3, 100).with_vouchers(2);
        let mut snap = Snapshot {
            accounts: spec.local_documents(),
            remote_accounts: spec.remote_documents(),
            ..Snapshot::default()
        };
        for (plan, committed) in plans {
            plan.validate(&spec).unwrap();
            if *committed {
                apply(&mut snap, plan);
                snap.records.push(record(plan, TxState::Done));
            } else {
                // An undone insert leaves nothing behind.
                snap.records.push(record(plan, TxState::Canceled));
            }
        }
        (spec, snap)
    }

    fn plan(txid: &str, kind: Kind, from: &str, to: &str, amount: i64) -> Plan {
        Plan {
            txid: txid.into(),
            kind,
            from: from.into(),
            to: to.into(),
            amount,
            issue: None,
        }
    }

    fn redeem(txid: &str, voucher: &str, to: &str, amount: i64, issue: &str) -> Plan {
        Plan {
            issue: Some(issue.into()),
            ..plan(txid, Kind::Redeem, voucher, to, amount)
        }
    }

    fn ids(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn plans() -> Vec<(Plan, bool)> {
        vec![
            (
                plan("t1", Kind::Transfer, "acct-00000", "acct-00001", 30),
                true,
            ),
            (
                plan("t2", Kind::Payment, "acct-00001", "merchant-0", 50),
                true,
            ),
            (
                plan("t3", Kind::Payout, "merchant-0", "acct-00002", 20),
                true,
            ),
            (
                plan("t4", Kind::Transfer, "acct-00002", "acct-00000", 45),
                false,
            ),
            (
                plan("t5", Kind::Payment, "acct-00000", "merchant-1", 10),
                false,
            ),
            (plan("t6", Kind::Payout, FEES, "acct-00000", 2), true),
            // voucher-0: issued, redeemed, issued again (the same _id, a new document).
            (plan("v1", Kind::Issue, "acct-00001", "voucher-0", 11), true),
            (redeem("v2", "voucher-0", "merchant-2", 10, "v1"), true),
            (plan("v3", Kind::Issue, "acct-00002", "voucher-0", 7), true),
            // voucher-1: issued, a redeem canceled, a second issue refused.
            (plan("v4", Kind::Issue, "acct-00000", "voucher-1", 5), true),
            (redeem("v5", "voucher-1", "merchant-1", 4, "v4"), false),
            (plan("v6", Kind::Issue, "acct-00002", "voucher-1", 9), false),
        ]
    }

    fn begin_lines(plans: &[(Plan, bool)]) -> String {
        plans
            .iter()
            .map(|(p, committed)| {
                format!(
                    "begin {}\n{} {}\n",
                    p.log_words(),
                    if *committed { "committed" } else { "canceled" },
                    p.txid
                )
            })
            .collect()
    }

    fn logs(lines: &str) -> LogSummary {
        let mut s = LogSummary::default();
        s.add_text(lines);
        s
    }

    fn drop_record(snap: &mut Snapshot, txid: &str) {
        snap.records.retain(|d| d.get_str("_id") != Ok(txid));
    }

    #[test]
    fn a_consistent_bank_passes() {
        let all = plans();
        let (spec, snap) = bank(&all);
        let l = logs(&format!(
            "{}begin t9 transfer acct-00000 acct-00001 5\n",
            begin_lines(&all)
        ));
        let report = check(&spec, &ns(), &snap, Some(&l));
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        assert_eq!((report.committed, report.canceled), (8, 4));
        assert_eq!((report.ledger_entries, report.ghosts), (8, 0));
        assert_eq!(report.total, 300 + i128::from(crate::bank::VAULT_START));
        assert_eq!(report.fee_count, 8);
        assert_eq!(
            report.vouchers,
            VoucherStats {
                issued: 3,
                redeemed: 1,
                live: 2,
                reissued: 1,
                placeholders: 0
            }
        );
    }

    #[test]
    fn collected_records_are_replaced_by_the_logs() {
        let all = plans();
        let (spec, mut snap) = bank(&all);
        for txid in ["t1", "t4", "v1", "v2", "v5"] {
            drop_record(&mut snap, txid);
        }
        let l = logs(&begin_lines(&all));
        let mut report = check(&spec, &ns(), &snap, Some(&l));
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        assert_eq!((report.committed, report.canceled), (8, 4));
        assert_eq!(
            (report.unrecorded_committed, report.unrecorded_canceled),
            (3, 2)
        );
        // Garbage collection asked for all five (the canceled ones too);
        // only the committed ones are known to be gone.
        check_collected(&mut report, &ids(&["t1", "t4", "v1", "v2", "v5"]));
        assert!(report.violations.is_empty());
        assert_eq!(report.collected_ids, ids(&["t1", "v1", "v2"]));
        // A record gone that it never asked for was removed by something else.
        check_collected(&mut report, &ids(&["t1", "t4", "v1", "v5"]));
        assert_eq!(report.count(Check::Orphan), 1);
        assert!(
            report.violations[0].detail.contains("the first: v2"),
            "{:#?}",
            report.violations
        );

        // Without the logs, an entry without its record is an orphan.
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Orphan), 3, "{:#?}", report.violations);

        // A collected entry must say what its worker planned, and must not
        // belong to a transaction its worker saw canceled.
        let mut lines = begin_lines(&all).replace(
            "begin t1 transfer acct-00000 acct-00001 30",
            "begin t1 transfer acct-00000 acct-00002 30",
        );
        lines.push_str("begin t7 transfer acct-00000 acct-00001 3\ncanceled t7\n");
        let (_, mut forged) = bank(&all);
        apply(
            &mut forged,
            &plan("t7", Kind::Transfer, "acct-00000", "acct-00001", 3),
        );
        drop_record(&mut forged, "t1");
        let report = check(&spec, &ns(), &forged, Some(&logs(&lines)));
        assert_eq!(report.count(Check::RecordMismatch), 1);
        assert_eq!(report.count(Check::AcknowledgedCancel), 1);
        assert_eq!(report.violations.len(), 2, "{:#?}", report.violations);
    }

    /// A key refused before its record was written is kept by a `canceled`
    /// record of no participants: garbage collection did not make it, and
    /// it was taken for a stub nothing asked for.
    #[test]
    fn a_record_refused_before_it_was_written_is_no_stub() {
        let all = plans();
        let (spec, mut snap) = bank(&all);
        let refused = snap
            .records
            .iter_mut()
            .find(|d| d.get_str("state") == Ok("canceled"))
            .expect("a canceled record");
        refused.insert("participants", Bson::Array(vec![]));
        refused.insert(
            "history",
            vec![Bson::Document(doc! {
                "state": "canceled", "owner": "test", "epoch": 0_i64,
                "event": "refused before its record",
            })],
        );
        let l = logs(&begin_lines(&all));
        let mut report = check(&spec, &ns(), &snap, Some(&l));
        assert_eq!(report.stub_records, 0);
        check_collected(&mut report, &BTreeSet::new());
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
    }

    #[test]
    fn stubs_keep_the_state_and_the_logs_the_plan() {
        let all = plans();
        let (spec, mut snap) = bank(&all);
        for txid in ["t1", "t4", "v2", "v5"] {
            stub(&mut snap, txid);
        }
        drop_record(&mut snap, "v1");
        let l = logs(&begin_lines(&all));
        let mut report = check(&spec, &ns(), &snap, Some(&l));
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        assert_eq!((report.committed, report.canceled), (8, 4));
        assert_eq!((report.done_records, report.canceled_records), (7, 4));
        assert_eq!((report.stub_records, report.stubbed_committed), (4, 2));
        check_collected(&mut report, &ids(&["t1", "t4", "v1", "v2", "v5"]));
        assert!(report.violations.is_empty());
        assert_eq!(report.collected_ids, ids(&["t1", "t4", "v1", "v2", "v5"]));
        // A stub it never asked for was made by something else.
        check_collected(&mut report, &ids(&["t1", "v1", "v2", "v5"]));
        assert_eq!(report.count(Check::Orphan), 1);

        // A canceled stub still tells a compensation was lost; a done stub's
        // entry must say what its worker planned.
        let (_, mut bad) = bank(&all);
        apply(
            &mut bad,
            &plan("t4", Kind::Transfer, "acct-00002", "acct-00000", 45),
        );
        stub(&mut bad, "t4");
        stub(&mut bad, "t1");
        let lines = begin_lines(&all).replace(
            "begin t1 transfer acct-00000 acct-00001 30",
            "begin t1 transfer acct-00000 acct-00002 30",
        );
        let report = check(&spec, &ns(), &bad, Some(&logs(&lines)));
        assert_eq!(report.count(Check::LostCompensation), 1);
        assert_eq!(report.count(Check::RecordMismatch), 1);
        assert_eq!(report.violations.len(), 2, "{:#?}", report.violations);
    }

    #[test]
    fn cancel_causes_are_classified() {
        assert_eq!(
            cancel_cause(Some(
                "bank.accounts/acct-00001: guard failed: balance >= 30 (found 2)"
            )),
            "guard"
        );
        assert_eq!(
            cancel_cause(Some(
                "bank.accounts/merchant-0: conflict with transaction w1.0.1-9"
            )),
            "conflict"
        );
        assert_eq!(
            cancel_cause(Some(
                "(recovery): rejected: rolled back by recovery after the lease expired"
            )),
            "recovery"
        );
        assert_eq!(
            cancel_cause(Some(
                "remote:bank_2.vouchers/voucher-1: document already exists"
            )),
            "exists"
        );
        assert_eq!(cancel_cause(None), "other");
    }

    #[test]
    fn a_credit_applied_twice_is_counted() {
        let (spec, mut snap) = bank(&plans());
        add(account(&mut snap, "acct-00001"), "balance", 29);
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Conservation), 1);
        assert_eq!(report.count(Check::Balance), 1);
        assert_eq!(report.violations.len(), 2, "{:#?}", report.violations);
    }

    #[test]
    fn a_fee_taken_twice_or_not_at_all_is_counted() {
        let (spec, mut snap) = bank(&plans());
        let fees = account(&mut snap, FEES);
        add(fees, "count", 1);
        add(fees, "balance", 1);
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::FeeCount), 1);
        assert_eq!(report.count(Check::Conservation), 1);
        assert_eq!(report.count(Check::Balance), 1);
        assert_eq!(report.violations.len(), 3, "{:#?}", report.violations);
    }

    #[test]
    fn a_lost_compensation_is_counted() {
        // t4 was canceled, but its changes stayed and so did its ledger entry.
        let (spec, mut snap) = bank(&plans());
        apply(
            &mut snap,
            &plan("t4", Kind::Transfer, "acct-00002", "acct-00000", 45),
        );
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::LostCompensation), 1);
        assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);

        // The same, with only the debit left behind (the ledger insert was undone).
        let (spec, mut snap) = bank(&plans());
        add(account(&mut snap, "acct-00002"), "balance", -45);
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Conservation), 1);
        assert_eq!(report.count(Check::Balance), 1);
    }

    #[test]
    fn a_commit_without_effects_and_an_unrecorded_entry_are_counted() {
        let (spec, mut snap) = bank(&plans());
        // t1 is done, but its ledger entry became a placeholder and its amounts went back.
        add(account(&mut snap, "acct-00000"), "balance", 30);
        add(account(&mut snap, "acct-00001"), "balance", -29);
        let fees = account(&mut snap, FEES);
        add(fees, "balance", -1);
        add(fees, "count", -1);
        snap.ledger.retain(|d| d.get_str("_id") != Ok("t1"));
        snap.ledger
            .push(doc! { "_id": "t1", META_FIELD: { "ghost": true } });
        // A ledger entry nobody recorded, with its effects.
        let (_, mut base) = bank(&[]);
        apply(
            &mut base,
            &plan("t7", Kind::Transfer, "acct-00000", "acct-00001", 3),
        );
        snap.ledger.push(base.ledger.pop().unwrap());
        add(account(&mut snap, "acct-00000"), "balance", -3);
        add(account(&mut snap, "acct-00001"), "balance", 2);
        let fees = account(&mut snap, FEES);
        add(fees, "balance", 1);
        add(fees, "count", 1);
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Placeholder), 1);
        assert_eq!(report.count(Check::Orphan), 1);
        assert_eq!(report.violations.len(), 2, "{:#?}", report.violations);

        // Without the placeholder, the entry is simply missing.
        snap.ledger.retain(|d| d.get_str("_id") != Ok("t1"));
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::CommittedMissing), 1);
        assert_eq!(report.violations.len(), 2, "{:#?}", report.violations);
    }

    #[test]
    fn leftovers_and_unfinished_records_are_counted() {
        let (spec, mut snap) = bank(&plans());
        account(&mut snap, "acct-00002").insert("pendingTransactions", vec!["t9"]);
        account(&mut snap, "merchant-1").insert(META_FIELD, doc! { "lock": "t4" });
        account(&mut snap, FEES).insert(META_FIELD, doc! { "pending": 1 });
        snap.vouchers[0].insert(META_FIELD, doc! { "pending": 0, "deleting": true });
        let mut stuck = record(
            &plan("t9", Kind::Transfer, "acct-00000", "acct-00002", 5),
            TxState::Pending,
        );
        stuck.insert("epoch", 3_i64);
        snap.records.push(stuck);
        snap.records
            .push(doc! { "_id": "bad", "state": "sideways" });
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Marker), 2);
        assert_eq!(report.count(Check::Lock), 2);
        assert_eq!(report.count(Check::InFlight), 1);
        assert_eq!(report.count(Check::Unreadable), 1);
        assert_eq!(report.in_flight, 1);
        assert_eq!(report.violations.len(), 6, "{:#?}", report.violations);
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.detail.contains("lock of t4 (canceled)")),
            "{:#?}",
            report.violations
        );
    }

    #[test]
    fn negative_missing_misplaced_and_merchant_fields_are_counted() {
        let (spec, mut snap) = bank(&plans());
        // Money moved from one account into the red, consistently with a forged entry.
        let forged = plan("t8", Kind::Transfer, "acct-00002", "acct-00000", 50);
        for _ in 0..10 {
            add(account(&mut snap, "acct-00002"), "balance", -50);
            add(account(&mut snap, "acct-00000"), "balance", 50);
        }
        let mut entry = doc! { "_id": "t8" };
        entry.extend(forged.ledger_entry());
        entry.insert("amount", 500_i64);
        entry.insert("fee", 0_i64);
        snap.ledger.push(entry);
        let m = account(&mut snap, "merchant-0");
        m.insert("payments", 2_i64);
        m.insert("lastPayment", "t5");
        snap.accounts
            .push(doc! { "_id": "acct-00099", "balance": 0_i64 });
        snap.remote_accounts
            .retain(|d| d.get_str("_id") != Ok("merchant-2"));
        let c = snap.accounts.remove(1);
        snap.remote_accounts.push(c);
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Negative), 1);
        assert_eq!(report.count(Check::Ledger), 1);
        assert_eq!(report.count(Check::PaymentsCounter), 1);
        assert_eq!(report.count(Check::LastPayment), 1);
        // acct-00099, merchant-2 missing, acct-00001 on server 2 (and so missing).
        assert_eq!(report.count(Check::Accounts), 4, "{:#?}", report.violations);
    }

    #[test]
    fn a_ledger_entry_that_disagrees_with_its_record_is_counted() {
        let (spec, mut snap) = bank(&plans());
        let entry = snap
            .ledger
            .iter_mut()
            .find(|d| d.get_str("_id") == Ok("t3"))
            .unwrap();
        entry.insert("to", "acct-00001");
        add(account(&mut snap, "acct-00002"), "balance", -19);
        add(account(&mut snap, "acct-00001"), "balance", 19);
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::RecordMismatch), 1);
        assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
    }

    #[test]
    fn what_workers_were_told_must_match_the_records() {
        let (spec, snap) = bank(&plans());
        let l = logs(
            "begin t1 transfer acct-00000 acct-00001 30\ncanceled t1\n\
             begin t4 transfer acct-00002 acct-00000 45\ncommitted t4\n\
             begin t5 payment acct-00000 merchant-1 10\nunknown t5 why\n\
             begin t6 transfer acct-00000 acct-00001 2\ncommitted t6\n\
             begin t2 payment acct-00001 merchant-0 50\ncommitted t2\ncanceled t2\n",
        );
        let report = check(&spec, &ns(), &snap, Some(&l));
        // t4 canceled but told committed; t1 done but told canceled;
        // t2 logged both ways (its last word, canceled, is also wrong).
        // (t6's record is done: what it was told holds.)
        assert_eq!(report.count(Check::AcknowledgedCommit), 1);
        assert_eq!(report.count(Check::AcknowledgedCancel), 2);
        assert_eq!(report.count(Check::Log), 1);
        assert_eq!(report.violations.len(), 4, "{:#?}", report.violations);

        // Told committed, with neither a record nor a ledger entry.
        let l = logs("begin t7 transfer acct-00000 acct-00001 2\ncommitted t7\n");
        let report = check(&spec, &ns(), &snap, Some(&l));
        assert_eq!(report.count(Check::AcknowledgedCommit), 1);
    }

    #[test]
    fn a_resurrected_voucher_is_counted() {
        // voucher-0's first issue comes back after its redeem (and the re-issue
        // never happened): a late insert resurrected it.
        let mut all = plans();
        all.retain(|(p, _)| p.txid != "v3");
        let (spec, mut snap) = bank(&all);
        snap.vouchers.push(doc! {
            "_id": "voucher-0", "amount": 10_i64, "issue": "v1", "from": "acct-00001",
            "pendingTransactions": [], META_FIELD: { "pending": 0 },
        });
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Voucher), 1, "{:#?}", report.violations);
        assert!(report.violations[..]
            .iter()
            .any(|v| v.detail.contains("resurrected")));
        assert_eq!(report.count(Check::Conservation), 1);
        assert_eq!(report.count(Check::Balance), 1);

        // Re-issued, but the document is the old issue's.
        let (spec, mut snap) = bank(&plans());
        let v = snap
            .vouchers
            .iter_mut()
            .find(|d| d.get_str("_id") == Ok("voucher-0"))
            .unwrap();
        v.insert("issue", "v1");
        v.insert("from", "acct-00001");
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Voucher), 1, "{:#?}", report.violations);
        assert_eq!(report.violations.len(), 1);

        // A stale field on the re-issued voucher: not a fresh document.
        let (spec, mut snap) = bank(&plans());
        snap.vouchers[0].insert("redeemedBy", "v2");
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Voucher), 1, "{:#?}", report.violations);
    }

    #[test]
    fn voucher_histories_are_checked() {
        // A placeholder where a committed issue's voucher should be.
        let (spec, mut snap) = bank(&plans());
        let v = snap
            .vouchers
            .iter_mut()
            .find(|d| d.get_str("_id") == Ok("voucher-1"))
            .unwrap();
        *v = doc! { "_id": "voucher-1", META_FIELD: { "ghost": true } };
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(
            report.count(Check::Placeholder),
            1,
            "{:#?}",
            report.violations
        );
        assert_eq!(report.vouchers.placeholders, 1);

        // An issue redeemed twice; a redeem of an issue that never committed
        // (their voucher documents left alone: they took money from nowhere).
        let (spec, mut snap) = bank(&plans());
        for p in [
            redeem("v7", "voucher-0", "merchant-0", 10, "v1"),
            redeem("v8", "voucher-1", "merchant-0", 8, "v6"),
        ] {
            effects(&mut snap, &p, false);
            snap.records.push(record(&p, TxState::Done));
        }
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Voucher), 2, "{:#?}", report.violations);
        assert_eq!(report.count(Check::Conservation), 1);
    }
}
