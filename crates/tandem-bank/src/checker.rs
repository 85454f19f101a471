//! The checker: what must hold once every transaction of a run has finished.
//!
//! [`check`] is a pure function of a [`Snapshot`] (the accounts, the ledger
//! and the transaction records, read after recovery reached quiescence) and
//! of the workers' logs, so it can be tested on fabricated states. It counts
//! every broken invariant as a [`Violation`] of one [`Check`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use bson::{Bson, Document};
use tandem::change::{DocumentOp, FieldOp, DEFAULT_MARKER, META_FIELD};
use tandem::{DocumentChange, TxRecord, TxState};

use crate::bank::{BankNs, BankSpec, Kind};
use crate::outcome_log::{LogSummary, Logged};

/// The documents of a bank after a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Every document of `<db>.accounts`.
    pub accounts: Vec<Document>,
    /// Every document of `<db>.ledger`, undone-insert placeholders included.
    pub ledger: Vec<Document>,
    /// Every document of `<db>.transactions`.
    pub records: Vec<Document>,
}

/// One invariant of the bank test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// The sum of all balances equals the money seeded.
    Conservation,
    /// No balance is negative.
    Negative,
    /// Every account exists once, with an integer balance, and no other account exists.
    Accounts,
    /// Every record is readable.
    Unreadable,
    /// Every record is `done` or `canceled`.
    InFlight,
    /// No document keeps an entry in its marker array.
    Marker,
    /// No document keeps a `_tandem.lock`.
    Lock,
    /// Every ledger entry is well formed.
    Ledger,
    /// Each balance equals its initial value plus the credits minus the debits of the ledger.
    Balance,
    /// Each merchant's `payments` counter equals its payments in the ledger.
    PaymentsCounter,
    /// Each merchant's `lastPayment` names one of its committed payments.
    LastPayment,
    /// Every `done` transaction has its ledger entry.
    CommittedMissing,
    /// Every ledger entry belongs to a `done` transaction.
    Orphan,
    /// No `canceled` transaction left its ledger entry (and so its amounts) behind.
    LostCompensation,
    /// Each ledger entry says what its transaction record says.
    RecordMismatch,
    /// Every transaction a worker saw commit is `done`.
    AcknowledgedCommit,
    /// Every transaction a worker saw canceled is `canceled`.
    AcknowledgedCancel,
    /// No transaction was logged with two different outcomes.
    Log,
    /// `tandem::testing::audit` found nothing (a cross-check run on the live store).
    Audit,
}

impl Check {
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
            Check::CommittedMissing => "committed-not-applied",
            Check::Orphan => "ledger-without-commit",
            Check::LostCompensation => "compensation-lost",
            Check::RecordMismatch => "record-ledger-mismatch",
            Check::AcknowledgedCommit => "acknowledged-commit-lost",
            Check::AcknowledgedCancel => "acknowledged-cancel-broken",
            Check::Log => "contradictory-log",
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

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Every broken invariant.
    pub violations: Vec<Violation>,
    /// Records in state `done`.
    pub committed: u64,
    /// Records in state `canceled`.
    pub canceled: u64,
    /// Records in any other state.
    pub in_flight: u64,
    /// Ledger documents that are entries (not undone-insert placeholders).
    pub ledger_entries: u64,
    /// Undone-insert placeholders in the ledger.
    pub ghosts: u64,
    /// The sum of all balances.
    pub total: i64,
    /// Why the `canceled` records were canceled (see [`cancel_cause`]), counted.
    pub cancel_causes: BTreeMap<&'static str, u64>,
}

/// Classifies the `lastError` of a canceled record: `guard` (a balance too low),
/// `conflict` (a document held by another transaction), `recovery` (rolled back
/// by recovery after its lease ended), `store` (a store error while applying),
/// `fenced`, `not-found`, or `other`.
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

    fn add(&mut self, check: Check, detail: impl Into<String>) {
        self.violations.push(Violation {
            check,
            detail: detail.into(),
        });
    }
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

/// The marker and lock checks of one document.
fn check_leftovers(report: &mut Report, what: &str, doc: &Document) {
    let id = id_text(doc);
    if let Some(Bson::Array(list)) = doc.get(DEFAULT_MARKER) {
        if !list.is_empty() {
            report.add(Check::Marker, format!("{what}/{id} keeps markers {list:?}"));
        }
    }
    let lock = doc
        .get_document(META_FIELD)
        .ok()
        .and_then(|m| m.get("lock"))
        .filter(|l| **l != Bson::Null);
    if let Some(lock) = lock {
        report.add(Check::Lock, format!("{what}/{id} keeps lock {lock}"));
    }
    let pending = integer(
        doc.get_document(META_FIELD)
            .ok()
            .and_then(|m| m.get("pending")),
    )
    .unwrap_or(0);
    if pending != 0 {
        report.add(
            Check::Marker,
            format!("{what}/{id} counts {pending} pending transaction(s)"),
        );
    }
}

/// A live ledger entry, read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    kind: Kind,
    from: String,
    to: String,
    amount: i64,
}

fn read_entry(doc: &Document) -> Result<Entry, String> {
    let kind = doc
        .get_str("kind")
        .map_err(|_| "no kind".to_owned())?
        .parse::<Kind>()?;
    let from = doc.get_str("from").map_err(|_| "no from")?.to_owned();
    let to = doc.get_str("to").map_err(|_| "no to")?.to_owned();
    let amount = integer(doc.get("amount")).ok_or("no integer amount")?;
    if amount <= 0 {
        return Err(format!("amount {amount} is not positive"));
    }
    Ok(Entry {
        kind,
        from,
        to,
        amount,
    })
}

/// What a record says its transaction does: `(debited, amount)`, `(credited, amount)`, the ledger insert.
fn record_effects(record: &TxRecord, ns: &BankNs) -> Result<Entry, String> {
    let mut debit: Option<(String, i64)> = None;
    let mut credit: Option<(String, i64)> = None;
    let mut inserted: Option<Entry> = None;
    for p in &record.participants {
        let change: DocumentChange = bson::from_document(p.spec.clone())
            .map_err(|e| format!("participant {}: {e}", p.label))?;
        let id = match &change.id {
            Bson::String(s) => s.clone(),
            other => other.to_string(),
        };
        match &change.op {
            DocumentOp::Insert { doc } if change.namespace == ns.ledger() => {
                if id != record.id.as_str() {
                    return Err(format!("inserts ledger entry {id}"));
                }
                inserted = Some(read_entry(doc)?);
            }
            DocumentOp::Update { ops } if change.namespace == ns.accounts() => {
                for op in ops {
                    if let FieldOp::Inc { path, by } = op {
                        if path != "balance" {
                            continue;
                        }
                        let by = integer(Some(by)).ok_or("a non-integer balance change")?;
                        if by < 0 {
                            debit = Some((id.clone(), -by));
                        } else {
                            credit = Some((id.clone(), by));
                        }
                    }
                }
            }
            _ => return Err(format!("unexpected participant {}", p.label)),
        }
    }
    let (Some((from, out)), Some((to, inn)), Some(entry)) = (debit, credit, inserted) else {
        return Err("not a debit, a credit and a ledger insert".into());
    };
    if entry.from != from || entry.to != to || entry.amount != out || entry.amount != inn {
        return Err(format!(
            "moves {out} from {from} and {inn} to {to}, its ledger entry says {entry:?}"
        ));
    }
    Ok(entry)
}

/// Checks a bank after a run. `logs`, when given, are compared with the records.
pub fn check(spec: &BankSpec, ns: &BankNs, snap: &Snapshot, logs: Option<&LogSummary>) -> Report {
    let mut report = Report::default();

    // Records: readable and finished.
    let mut records: BTreeMap<String, TxRecord> = BTreeMap::new();
    for doc in &snap.records {
        match TxRecord::from_document(doc.clone()) {
            Ok(r) => {
                match r.state {
                    TxState::Done => report.committed += 1,
                    TxState::Canceled => {
                        report.canceled += 1;
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

    // Accounts: each one present once, integer balances, none negative, nothing left behind.
    let mut balances: BTreeMap<String, i64> = BTreeMap::new();
    let mut merchants: BTreeMap<String, &Document> = BTreeMap::new();
    for doc in &snap.accounts {
        let id = id_text(doc);
        check_leftovers(&mut report, "accounts", doc);
        if spec.initial_balance(&id).is_none() {
            report.add(Check::Accounts, format!("unexpected account {id}"));
            continue;
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
        }
    }
    for id in (0..spec.customers)
        .map(BankSpec::customer)
        .chain((0..spec.merchants).map(BankSpec::merchant))
    {
        if !balances.contains_key(&id) {
            report.add(Check::Accounts, format!("account {id} is missing"));
        }
    }
    report.total = balances.values().sum();
    if report.total != spec.total() {
        report.add(
            Check::Conservation,
            format!(
                "balances sum to {}, the bank was seeded with {}",
                report.total,
                spec.total()
            ),
        );
    }

    // The ledger: its live entries are exactly the committed transactions.
    let mut delta: BTreeMap<String, i64> = BTreeMap::new();
    let mut payments: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut live: BTreeSet<String> = BTreeSet::new();
    for doc in &snap.ledger {
        let txid = id_text(doc);
        check_leftovers(&mut report, "ledger", doc);
        if is_ghost(doc) {
            report.ghosts += 1;
            continue;
        }
        report.ledger_entries += 1;
        let entry = match read_entry(doc) {
            Ok(e) => e,
            Err(why) => {
                report.add(Check::Ledger, format!("ledger/{txid}: {why}"));
                continue;
            }
        };
        live.insert(txid.clone());
        match state_of(&txid) {
            Some(TxState::Done) => {
                if let Err(why) = record_effects(&records[&txid], ns).and_then(|said| {
                    if said == entry {
                        Ok(())
                    } else {
                        Err(format!("record says {said:?}, ledger says {entry:?}"))
                    }
                }) {
                    report.add(Check::RecordMismatch, format!("{txid}: {why}"));
                }
            }
            Some(TxState::Canceled) => report.add(
                Check::LostCompensation,
                format!(
                    "{txid} is canceled but its ledger entry stayed ({} {} from {} to {})",
                    entry.kind, entry.amount, entry.from, entry.to
                ),
            ),
            Some(state) => report.add(
                Check::Orphan,
                format!("ledger entry {txid} belongs to a transaction left {state}"),
            ),
            None => report.add(
                Check::Orphan,
                format!("ledger entry {txid} has no transaction record"),
            ),
        }
        *delta.entry(entry.from.clone()).or_default() -= entry.amount;
        *delta.entry(entry.to.clone()).or_default() += entry.amount;
        if entry.kind == Kind::Payment {
            payments.entry(entry.to.clone()).or_default().insert(txid);
        }
    }
    for (txid, r) in &records {
        if r.state == TxState::Done && !live.contains(txid) {
            report.add(
                Check::CommittedMissing,
                format!("{txid} is done but has no ledger entry"),
            );
        }
    }
    for account in delta.keys() {
        if spec.initial_balance(account).is_none() {
            report.add(
                Check::Ledger,
                format!("the ledger moves money of unknown account {account}"),
            );
        }
    }

    // Every committed transfer applied exactly once, every canceled one not at all.
    for (id, balance) in &balances {
        let initial = spec.initial_balance(id).unwrap_or(0);
        let moved = delta.get(id).copied().unwrap_or(0);
        if *balance != initial + moved {
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

    // What the workers were told.
    if let Some(logs) = logs {
        for (txid, outcome) in &logs.outcomes {
            let state = state_of(txid);
            match outcome {
                Logged::Committed if state != Some(TxState::Done) => report.add(
                    Check::AcknowledgedCommit,
                    format!("{txid} was reported committed, its record is {state:?}"),
                ),
                Logged::Canceled if state != Some(TxState::Canceled) => report.add(
                    Check::AcknowledgedCancel,
                    format!("{txid} was reported canceled, its record is {state:?}"),
                ),
                _ => {}
            }
        }
        for txid in &logs.contradictory {
            report.add(
                Check::Log,
                format!("{txid} was logged both committed and canceled"),
            );
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bank::Plan;
    use bson::doc;
    use tandem::record::ParticipantEntry;
    use tandem::{Participant, TxId};

    fn ns() -> BankNs {
        BankNs::new("bank")
    }

    fn record(plan: &Plan, state: TxState) -> Document {
        let participants = plan
            .changes(&ns())
            .into_iter()
            .map(|c| ParticipantEntry {
                kind: "document".into(),
                label: c.label(),
                spec: Participant::spec(&c).unwrap(),
                before: None,
            })
            .collect();
        TxRecord {
            id: TxId::new(plan.txid.clone()).unwrap(),
            state,
            participants,
            owner: "test".into(),
            epoch: 1,
            lease_millis: 2000,
            created: None,
            last_modified: None,
            finished_at: None,
            claim_token: None,
            token: None,
            lease_start: None,
            not_before: None,
            attempts: 0,
            last_error: None,
            history: Vec::new(),
        }
        .to_document()
        .unwrap()
    }

    fn account<'a>(snap: &'a mut Snapshot, id: &str) -> &'a mut Document {
        snap.accounts
            .iter_mut()
            .find(|d| d.get_str("_id") == Ok(id))
            .unwrap()
    }

    fn add(snap: &mut Document, field: &str, by: i64) {
        let now = integer(snap.get(field)).unwrap_or(0);
        snap.insert(field, now + by);
    }

    /// A bank of 3 customers after `plans` ran, each committed (`true`) or canceled,
    /// in the exact state a correct run leaves.
    fn bank(plans: &[(Plan, bool)]) -> (BankSpec, Snapshot) {
        let spec = BankSpec::new(3, 100);
        let mut snap = Snapshot {
            accounts: spec.seed_documents(),
            ..Snapshot::default()
        };
        for (plan, committed) in plans {
            if *committed {
                add(account(&mut snap, &plan.from), "balance", -plan.amount);
                let to = account(&mut snap, &plan.to);
                add(to, "balance", plan.amount);
                if plan.kind == Kind::Payment {
                    add(to, "payments", 1);
                    to.insert("lastPayment", plan.txid.as_str());
                }
                let mut entry = doc! { "_id": plan.txid.as_str() };
                entry.extend(plan.ledger_entry());
                entry.insert("pendingTransactions", Bson::Array(vec![]));
                entry.insert(META_FIELD, doc! {});
                snap.ledger.push(entry);
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
        }
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
        ]
    }

    fn logs(lines: &str) -> LogSummary {
        let mut s = LogSummary::default();
        s.add_text(lines);
        s
    }

    #[test]
    fn a_consistent_bank_passes() {
        let (spec, snap) = bank(&plans());
        let l = logs("begin t1 x\ncommitted t1\nbegin t4 x\ncanceled t4\nbegin t9 x\n");
        let report = check(&spec, &ns(), &snap, Some(&l));
        assert!(report.violations.is_empty(), "{:#?}", report.violations);
        assert_eq!((report.committed, report.canceled), (3, 2));
        assert_eq!((report.ledger_entries, report.ghosts), (3, 0));
        assert_eq!(report.total, 300);
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
        assert_eq!(cancel_cause(None), "other");
    }

    #[test]
    fn a_credit_applied_twice_is_counted() {
        let (spec, mut snap) = bank(&plans());
        add(account(&mut snap, "acct-00001"), "balance", 30);
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Conservation), 1);
        assert_eq!(report.count(Check::Balance), 1);
        assert_eq!(report.violations.len(), 2, "{:#?}", report.violations);
    }

    #[test]
    fn a_lost_compensation_is_counted() {
        // t4 was canceled, but its debit and credit stayed and so did its ledger entry.
        let (spec, mut snap) = bank(&plans());
        add(account(&mut snap, "acct-00002"), "balance", -45);
        add(account(&mut snap, "acct-00000"), "balance", 45);
        snap.ledger.push(doc! { "_id": "t4", "kind": "transfer", "from": "acct-00002", "to": "acct-00000", "amount": 45_i64 });
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
        add(account(&mut snap, "acct-00001"), "balance", -30);
        snap.ledger
            .retain(|d| d.get_str("_id") != Ok("t1") || is_ghost(d));
        snap.ledger
            .push(doc! { "_id": "t1", META_FIELD: { "ghost": true } });
        // A ledger entry nobody recorded.
        snap.ledger.push(doc! { "_id": "t7", "kind": "transfer", "from": "acct-00000", "to": "acct-00001", "amount": 1_i64 });
        add(account(&mut snap, "acct-00000"), "balance", -1);
        add(account(&mut snap, "acct-00001"), "balance", 1);
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::CommittedMissing), 1);
        assert_eq!(report.count(Check::Orphan), 1);
        assert_eq!(report.violations.len(), 2, "{:#?}", report.violations);
    }

    #[test]
    fn leftovers_and_unfinished_records_are_counted() {
        let (spec, mut snap) = bank(&plans());
        account(&mut snap, "acct-00002").insert("pendingTransactions", vec!["t9"]);
        account(&mut snap, "merchant-1").insert(META_FIELD, doc! { "lock": "t9" });
        let mut stuck = record(
            &plan("t9", Kind::Transfer, "acct-00000", "acct-00002", 5),
            TxState::Pending,
        );
        stuck.insert("epoch", 3_i64);
        snap.records.push(stuck);
        snap.records
            .push(doc! { "_id": "bad", "state": "sideways" });
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Marker), 1);
        assert_eq!(report.count(Check::Lock), 1);
        assert_eq!(report.count(Check::InFlight), 1);
        assert_eq!(report.count(Check::Unreadable), 1);
        assert_eq!(report.in_flight, 1);
        assert_eq!(report.violations.len(), 4, "{:#?}", report.violations);
    }

    #[test]
    fn negative_missing_and_merchant_fields_are_counted() {
        let (spec, mut snap) = bank(&plans());
        // Money moved from one account into the red, consistently with a forged entry.
        add(account(&mut snap, "acct-00002"), "balance", -500);
        add(account(&mut snap, "acct-00000"), "balance", 500);
        snap.ledger.push(doc! { "_id": "t8", "kind": "transfer", "from": "acct-00002", "to": "acct-00000", "amount": 500_i64 });
        snap.records.push(record(
            &plan("t8", Kind::Transfer, "acct-00002", "acct-00000", 500),
            TxState::Done,
        ));
        let m = account(&mut snap, "merchant-0");
        m.insert("payments", 2_i64);
        m.insert("lastPayment", "t5");
        snap.accounts
            .push(doc! { "_id": "acct-00099", "balance": 0_i64 });
        snap.accounts
            .retain(|d| d.get_str("_id") != Ok("merchant-2"));
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::Negative), 1);
        assert_eq!(report.count(Check::PaymentsCounter), 1);
        assert_eq!(report.count(Check::LastPayment), 1);
        assert_eq!(report.count(Check::Accounts), 2);
        assert_eq!(report.violations.len(), 5, "{:#?}", report.violations);
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
        add(account(&mut snap, "acct-00002"), "balance", -20);
        add(account(&mut snap, "acct-00001"), "balance", 20);
        let report = check(&spec, &ns(), &snap, None);
        assert_eq!(report.count(Check::RecordMismatch), 1);
        assert_eq!(report.violations.len(), 1, "{:#?}", report.violations);
    }

    #[test]
    fn what_workers_were_told_must_match_the_records() {
        let (spec, snap) = bank(&plans());
        let l = logs(
            "begin t1 x\ncanceled t1\nbegin t4 x\ncommitted t4\nbegin t5 x\nunknown t5 why\n\
             begin t6 x\ncommitted t6\nbegin t2 x\ncommitted t2\ncanceled t2\n",
        );
        let report = check(&spec, &ns(), &snap, Some(&l));
        // t4 canceled but told committed; t6 has no record; t1 done but told canceled;
        // t2 logged both ways (its last word, canceled, is also wrong).
        assert_eq!(report.count(Check::AcknowledgedCommit), 2);
        assert_eq!(report.count(Check::AcknowledgedCancel), 2);
        assert_eq!(report.count(Check::Log), 1);
        assert_eq!(report.violations.len(), 5, "{:#?}", report.violations);
    }
}
