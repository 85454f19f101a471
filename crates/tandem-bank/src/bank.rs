//! The bank: its accounts, its vouchers, its ledger, and the transactions the workers run.
//!
//! The bank lives on two servers (two stores of one coordinator):
//!
//! * server 1, the coordinator's default store, database `<db>`:
//!   * `accounts` holds the customer accounts `acct-00000`, `acct-00001`, …,
//!     each starting with the initial balance;
//!   * `ledger` gets one document per committed transaction, inserted by the
//!     transaction itself as one of its participants: `{_id: <txid>, kind,
//!     from, to, amount, fee}` (and `issue` for a redeem). An undone insert
//!     leaves nothing; a placeholder holding only `_tandem: {ghost: true}`
//!     (an `_id` reserved by an insert that never filled it) is not a ledger
//!     entry;
//!   * `transactions` holds tandem's transaction records;
//!   * `meta` holds a token identifying the run (checked after each server restart).
//! * server 2, the store named [`REMOTE`], database `<db2>`:
//!   * `accounts` holds the merchant accounts `merchant-0`, `merchant-1`, …
//!     (starting at zero, with a `payments` counter) and the fee account
//!     [`FEES`] (starting at zero, with a `count` of the transactions that paid
//!     it), the hot document every transaction touches;
//!   * `vouchers` holds the live vouchers `voucher-0`, `voucher-1`, … of a
//!     small pool: `{_id, amount, issue: <txid of the issue>, from}`. An
//!     `issue` inserts one, a `redeem` deletes it, and the same `_id` is
//!     issued again later;
//!   * `meta` holds the run's token too.
//!
//! Every transaction moves `amount` out of `from`, `amount - fee` into `to`
//! and the fee ([`FEE`]) into the fee account; a voucher holds the money
//! between its issue and its redeem. No transaction creates or destroys money.

use std::fmt;
use std::str::FromStr;

use bson::{doc, Bson, Document};
use tandem::change::META_FIELD;
use tandem::{DocumentChange, Namespace, Transaction};

use crate::rng::Rng;

/// How many merchant accounts the bank has.
pub const MERCHANTS: usize = 3;

/// The largest amount of one transaction.
pub const MAX_AMOUNT: i64 = 50;

/// How far below `i64::MAX` the vault ([`VAULT`]) starts: room for a few
/// payments only, so that several credits near the limit are pending at once.
pub const VAULT_ROOM: i64 = 4 * MAX_AMOUNT;

/// The vault's initial balance: `i64::MAX - VAULT_ROOM`. Payments to it are
/// credits near the limit; tandem must refuse (cancel) every one that would
/// not fit together with those already pending, and payouts from it make room
/// again. A credit that did not fit would fail to land after its commit: the
/// transaction stuck `applied`, the money lost.
pub const VAULT_START: i64 = i64::MAX - VAULT_ROOM;

/// The vault: merchant 0, whose balance starts at [`VAULT_START`].
pub const VAULT: &str = "merchant-0";

/// The most customer accounts a run may have.
pub const MAX_ACCOUNTS: usize = 10_000;

/// The most vouchers the pool may have.
pub const MAX_VOUCHERS: usize = 1000;

/// The vouchers of the pool, unless `--vouchers` says otherwise: few, so that
/// the same `_id`s are deleted and created again often.
pub const DEFAULT_VOUCHERS: usize = 4;

/// The fee account's `_id`: credited by every transaction (on server 2).
pub const FEES: &str = "fees";

/// The fee every transaction pays into [`FEES`].
pub const FEE: i64 = 1;

/// The name of the second server's store in the coordinator.
pub const REMOTE: &str = "remote";

/// Percent of transactions that issue or redeem a voucher (when the pool is not empty).
pub const VOUCHER_PERCENT: u64 = 20;

/// The largest size of one entry of a marker array, in bytes: the element's
/// type byte, its index key (at most 4 digits and a NUL: one document holds
/// at most `64 workers x 16 tasks` live markers here), the string's length,
/// a transaction id of at most 32 bytes (the bank's ids, `w<i>.<n>.<t>-<seq>`,
/// are about 20), the token's tag (`#` and 12 characters) and a NUL.
pub const MARKER_ENTRY_MAX: usize = 1 + 5 + 4 + 32 + 13 + 1;

/// The most bytes the hot document ([`FEES`]) may take beside its marker
/// array: its own fields (balance, count, `_tandem`), with ample room to
/// spare. It holds however many transactions are in flight.
pub const HOT_BASE: usize = 4096;

/// The most bytes the hot document ([`FEES`]) may take while at most
/// `markers` transactions have a marker entry on it: [`HOT_BASE`] plus
/// [`MARKER_ENTRY_MAX`] per entry.
///
/// The controller checks on every sample that the document without its
/// marker array stays within [`HOT_BASE`] (a protocol that left anything
/// else behind per transaction, a tombstone or a history, would outgrow it
/// within a run), that the entries stay within
/// [`hot_markers_bound`](crate::controller::hot_markers_bound) (which does not
/// grow with the length of the run: markers left behind by finished
/// transactions would outgrow it), and that the whole stays within this
/// bound of both.
pub fn hot_bound(markers: usize) -> usize {
    HOT_BASE + markers * MARKER_ENTRY_MAX
}

/// The shape of a bank: how many customers, and what each starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BankSpec {
    /// Customer accounts.
    pub customers: usize,
    /// Merchant accounts (they start at zero).
    pub merchants: usize,
    /// The initial balance of each customer.
    pub initial: i64,
    /// The vouchers of the pool (`voucher-0` …).
    pub vouchers: usize,
}

/// Where an account lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Home {
    /// Server 1, `<db>.accounts` (customers).
    Local,
    /// Server 2, `<db2>.accounts` (merchants and the fee account).
    Remote,
}

impl BankSpec {
    /// A bank of `customers` customers starting with `initial` each, [`MERCHANTS`]
    /// merchants, the fee account, and [`DEFAULT_VOUCHERS`] vouchers.
    pub fn new(customers: usize, initial: i64) -> Self {
        BankSpec {
            customers,
            merchants: MERCHANTS,
            initial,
            vouchers: DEFAULT_VOUCHERS,
        }
    }

    /// The same bank with a pool of `vouchers` vouchers.
    pub fn with_vouchers(mut self, vouchers: usize) -> Self {
        self.vouchers = vouchers;
        self
    }

    /// The money in the bank, which no transaction may create or destroy
    /// (more than an `i64` holds: the vault starts near `i64::MAX`).
    pub fn total(&self) -> i128 {
        self.customers as i128 * i128::from(self.initial) + i128::from(VAULT_START)
    }

    /// The id of customer `i`.
    pub fn customer(i: usize) -> String {
        format!("acct-{i:05}")
    }

    /// The id of merchant `i`.
    pub fn merchant(i: usize) -> String {
        format!("merchant-{i}")
    }

    /// The id of voucher `i`.
    pub fn voucher(i: usize) -> String {
        format!("voucher-{i}")
    }

    /// The initial balance of the account `id`, if the bank has it (vouchers are not accounts).
    pub fn initial_balance(&self, id: &str) -> Option<i64> {
        if let Some(n) = id.strip_prefix("acct-") {
            let i: usize = n.parse().ok()?;
            (i < self.customers && id == Self::customer(i)).then_some(self.initial)
        } else if let Some(n) = id.strip_prefix("merchant-") {
            let i: usize = n.parse().ok()?;
            (i < self.merchants && id == Self::merchant(i)).then_some(if i == 0 {
                VAULT_START
            } else {
                0
            })
        } else if id == FEES {
            Some(0)
        } else {
            None
        }
    }

    /// Where the account `id` lives, if the bank has it.
    pub fn home(&self, id: &str) -> Option<Home> {
        self.initial_balance(id)?;
        Some(if self.is_customer(id) {
            Home::Local
        } else {
            Home::Remote
        })
    }

    /// Whether `id` names a customer of this bank.
    pub fn is_customer(&self, id: &str) -> bool {
        id.starts_with("acct-") && self.initial_balance(id).is_some()
    }

    /// Whether `id` names a merchant of this bank.
    pub fn is_merchant(&self, id: &str) -> bool {
        id.starts_with("merchant-") && self.initial_balance(id).is_some()
    }

    /// Whether `id` names a voucher of this bank's pool.
    pub fn is_voucher(&self, id: &str) -> bool {
        id.strip_prefix("voucher-")
            .and_then(|n| n.parse::<usize>().ok())
            .is_some_and(|i| i < self.vouchers && id == Self::voucher(i))
    }

    /// Every account id, customers first, then merchants, then the fee account.
    pub fn account_ids(&self) -> Vec<String> {
        (0..self.customers)
            .map(Self::customer)
            .chain((0..self.merchants).map(Self::merchant))
            .chain(std::iter::once(FEES.to_owned()))
            .collect()
    }

    /// The account documents of server 1 as seeded: the customers.
    pub fn local_documents(&self) -> Vec<Document> {
        (0..self.customers)
            .map(|i| {
                doc! { "_id": Self::customer(i), "balance": self.initial, "pendingTransactions": [] }
            })
            .collect()
    }

    /// The account documents of server 2 as seeded: the merchants and the fee account.
    pub fn remote_documents(&self) -> Vec<Document> {
        let merchants = (0..self.merchants).map(|i| {
            doc! {
                "_id": Self::merchant(i),
                "balance": if i == 0 { VAULT_START } else { 0_i64 },
                "payments": 0_i64,
                "pendingTransactions": [],
            }
        });
        merchants
            .chain(std::iter::once(doc! {
                "_id": FEES,
                "balance": 0_i64,
                "count": 0_i64,
                "pendingTransactions": [],
            }))
            .collect()
    }
}

/// Where the bank's collections live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BankNs {
    /// The database on server 1.
    pub db: String,
    /// The database on server 2 (another name, so that the two stores never
    /// share a collection even when both are one server).
    pub db2: String,
}

impl BankNs {
    /// The collections of database `db` on server 1 and `<db>_2` on server 2.
    pub fn new(db: impl Into<String>) -> Self {
        let db = db.into();
        BankNs {
            db2: format!("{db}_2"),
            db,
        }
    }

    /// The customer accounts (server 1).
    pub fn accounts(&self) -> Namespace {
        Namespace::new(&self.db, "accounts")
    }

    /// The merchant accounts and the fee account (server 2).
    pub fn remote_accounts(&self) -> Namespace {
        Namespace::new(&self.db2, "accounts")
    }

    /// The accounts collection holding the accounts of `home`.
    pub fn accounts_of(&self, home: Home) -> Namespace {
        match home {
            Home::Local => self.accounts(),
            Home::Remote => self.remote_accounts(),
        }
    }

    /// The live vouchers (server 2).
    pub fn vouchers(&self) -> Namespace {
        Namespace::new(&self.db2, "vouchers")
    }

    /// The ledger of committed transactions (server 1).
    pub fn ledger(&self) -> Namespace {
        Namespace::new(&self.db, "ledger")
    }

    /// tandem's transaction records (server 1).
    pub fn records(&self) -> Namespace {
        Namespace::new(&self.db, "transactions")
    }

    /// The run's own bookkeeping on server 1 (a token that identifies the run's server).
    pub fn meta(&self) -> Namespace {
        Namespace::new(&self.db, "meta")
    }

    /// The run's own bookkeeping on server 2.
    pub fn remote_meta(&self) -> Namespace {
        Namespace::new(&self.db2, "meta")
    }
}

/// What a transaction does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Customer to customer.
    Transfer,
    /// Customer to merchant; also counts the payment and records it as the
    /// merchant's `lastPayment`, which makes the merchant's change exclusive.
    Payment,
    /// Merchant (or the fee account) to customer.
    Payout,
    /// Customer to a new voucher: inserts the voucher document.
    Issue,
    /// Voucher to merchant: deletes the voucher document.
    Redeem,
}

impl Kind {
    /// The word stored in the ledger and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Transfer => "transfer",
            Kind::Payment => "payment",
            Kind::Payout => "payout",
            Kind::Issue => "issue",
            Kind::Redeem => "redeem",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "transfer" => Ok(Kind::Transfer),
            "payment" => Ok(Kind::Payment),
            "payout" => Ok(Kind::Payout),
            "issue" => Ok(Kind::Issue),
            "redeem" => Ok(Kind::Redeem),
            other => Err(format!("unknown transaction kind {other:?}")),
        }
    }
}

/// One planned transaction: `amount` leaves `from`, `amount - FEE` reaches
/// `to`, and [`FEE`] the fee account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The transaction id, also the ledger document's `_id`.
    pub txid: String,
    /// What it is.
    pub kind: Kind,
    /// The account (or, for a redeem, the voucher) debited.
    pub from: String,
    /// The account (or, for an issue, the voucher) credited.
    pub to: String,
    /// The amount taken from `from`: `2..=MAX_AMOUNT` (`3..` for an issue).
    pub amount: i64,
    /// For a redeem: the transaction that issued the voucher it redeems.
    pub issue: Option<String>,
}

/// What a worker's next transaction is, before any voucher is looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Draw {
    /// A transaction between accounts.
    Plan(Plan),
    /// An issue or a redeem of `voucher`: the worker reads the voucher and
    /// makes the plan with [`Plan::for_voucher`]; `blind` ones issue without looking.
    Voucher {
        /// The voucher's id.
        voucher: String,
        /// Issue it whatever it holds (the insert must then fail if it exists).
        blind: bool,
    },
}

/// A voucher document as read: `(issue, amount, from)`, or `None` for a
/// placeholder or anything else that is not a filled voucher.
pub fn read_voucher(doc: &Document) -> Option<(String, i64, String)> {
    let ghost = doc
        .get_document(META_FIELD)
        .ok()
        .and_then(|m| m.get("ghost"))
        .is_some();
    if ghost {
        return None;
    }
    let issue = doc.get_str("issue").ok()?.to_owned();
    let amount = match doc.get("amount")? {
        Bson::Int64(i) => *i,
        Bson::Int32(i) => i64::from(*i),
        _ => return None,
    };
    let from = doc.get_str("from").ok()?.to_owned();
    Some((issue, amount, from))
}

impl Plan {
    /// A random transaction between accounts with id `txid`: 50 % transfers,
    /// 20 % payments, 30 % payouts (a third of them from the fee account), so
    /// that the money the merchants and the fees collect flows back (less of
    /// it from the vault, which is meant to stay at its limit).
    pub fn random(spec: &BankSpec, rng: &mut Rng, txid: String) -> Plan {
        let amount = rng.range(2, MAX_AMOUNT as u64) as i64;
        let customer = |rng: &mut Rng| BankSpec::customer(rng.index(spec.customers));
        let merchant = |rng: &mut Rng| BankSpec::merchant(rng.index(spec.merchants));
        let roll = rng.below(100);
        let (kind, from, to) = if roll < 50 && spec.customers >= 2 {
            let a = rng.index(spec.customers);
            let b = (a + 1 + rng.index(spec.customers - 1)) % spec.customers;
            (Kind::Transfer, BankSpec::customer(a), BankSpec::customer(b))
        } else if roll < 70 {
            (Kind::Payment, customer(rng), merchant(rng))
        } else if roll < 90 {
            // Half the payouts the vault would make go to another merchant:
            // more money flows into the vault than out, so it stays at its
            // limit, where credits that would not fit are refused.
            let mut from = merchant(rng);
            if from == VAULT && spec.merchants > 1 && rng.coin() {
                from = BankSpec::merchant(1 + rng.index(spec.merchants - 1));
            }
            (Kind::Payout, from, customer(rng))
        } else {
            (Kind::Payout, FEES.to_owned(), customer(rng))
        };
        Plan {
            txid,
            kind,
            from,
            to,
            amount,
            issue: None,
        }
    }

    /// What a worker runs next: [`VOUCHER_PERCENT`] % voucher operations (a
    /// tenth of them blind issues), the rest [`random`](Self::random).
    pub fn draw(spec: &BankSpec, rng: &mut Rng, txid: String) -> Draw {
        if spec.vouchers > 0 && rng.percent(VOUCHER_PERCENT) {
            Draw::Voucher {
                voucher: BankSpec::voucher(rng.index(spec.vouchers)),
                blind: rng.percent(10),
            }
        } else {
            Draw::Plan(Plan::random(spec, rng, txid))
        }
    }

    /// The voucher operation on `voucher`, which holds `current` (as read;
    /// `None`: missing, or not read): a redeem to a random merchant if it
    /// holds a filled voucher, else an issue from a random customer.
    pub fn for_voucher(
        spec: &BankSpec,
        rng: &mut Rng,
        txid: String,
        voucher: &str,
        current: Option<&Document>,
    ) -> Plan {
        match current.and_then(read_voucher) {
            Some((issue, amount, _)) if amount > FEE => Plan {
                txid,
                kind: Kind::Redeem,
                from: voucher.to_owned(),
                to: BankSpec::merchant(rng.index(spec.merchants)),
                amount,
                issue: Some(issue),
            },
            _ => Plan {
                txid,
                kind: Kind::Issue,
                from: BankSpec::customer(rng.index(spec.customers)),
                to: voucher.to_owned(),
                amount: rng.range(FEE as u64 + 2, MAX_AMOUNT as u64) as i64,
                issue: None,
            },
        }
    }

    /// What `to` receives.
    pub fn credit(&self) -> i64 {
        self.amount - FEE
    }

    /// The voucher this plan issues or redeems, if any.
    pub fn voucher(&self) -> Option<&str> {
        match self.kind {
            Kind::Issue => Some(&self.to),
            Kind::Redeem => Some(&self.from),
            _ => None,
        }
    }

    /// Whether the plan is one the bank's workers could make: known accounts
    /// of the right sort for its kind, amounts in range, an issue named by
    /// (and only by) a redeem.
    pub fn validate(&self, spec: &BankSpec) -> Result<(), String> {
        let customer = |id: &str| spec.is_customer(id);
        let merchant = |id: &str| spec.is_merchant(id);
        let voucher = |id: &str| spec.is_voucher(id);
        let (from_ok, to_ok) = match self.kind {
            Kind::Transfer => (customer(&self.from), customer(&self.to)),
            Kind::Payment => (customer(&self.from), merchant(&self.to)),
            Kind::Payout => (
                merchant(&self.from) || self.from == FEES,
                customer(&self.to),
            ),
            Kind::Issue => (customer(&self.from), voucher(&self.to)),
            Kind::Redeem => (voucher(&self.from), merchant(&self.to)),
        };
        if !from_ok || !to_ok || self.from == self.to {
            return Err(format!(
                "a {} cannot move money from {} to {}",
                self.kind, self.from, self.to
            ));
        }
        let least = if self.kind == Kind::Issue {
            FEE + 2
        } else {
            FEE + 1
        };
        if !(least..=MAX_AMOUNT).contains(&self.amount) {
            return Err(format!(
                "amount {} of a {} is out of range",
                self.amount, self.kind
            ));
        }
        if (self.kind == Kind::Redeem) != self.issue.is_some() {
            return Err(format!("a {} with issue {:?}", self.kind, self.issue));
        }
        Ok(())
    }

    /// The ledger document this transaction inserts (without `_id`).
    pub fn ledger_entry(&self) -> Document {
        let mut entry = doc! {
            "kind": self.kind.as_str(),
            "from": &self.from,
            "to": &self.to,
            "amount": self.amount,
            "fee": FEE,
        };
        if let Some(issue) = &self.issue {
            entry.insert("issue", issue.as_str());
        }
        entry
    }

    /// Reads a plan back from its ledger entry (`doc`, with or without `_id`) and its txid.
    pub fn from_entry(txid: &str, doc: &Document) -> Result<Plan, String> {
        let kind = doc
            .get_str("kind")
            .map_err(|_| "no kind".to_owned())?
            .parse::<Kind>()?;
        let from = doc.get_str("from").map_err(|_| "no from")?.to_owned();
        let to = doc.get_str("to").map_err(|_| "no to")?.to_owned();
        let integer = |field: &str| match doc.get(field) {
            Some(Bson::Int64(i)) => Ok(*i),
            Some(Bson::Int32(i)) => Ok(i64::from(*i)),
            _ => Err(format!("no integer {field}")),
        };
        let amount = integer("amount")?;
        let fee = integer("fee")?;
        if fee != FEE {
            return Err(format!("fee {fee}, the bank charges {FEE}"));
        }
        let issue = match doc.get("issue") {
            None => None,
            Some(Bson::String(s)) => Some(s.clone()),
            Some(other) => return Err(format!("issue {other}")),
        };
        Ok(Plan {
            txid: txid.to_owned(),
            kind,
            from,
            to,
            amount,
            issue,
        })
    }

    /// The words of the plan in a worker's log line: `<txid> <kind> <from> <to> <amount> [<issue>]`.
    pub fn log_words(&self) -> String {
        let mut words = format!(
            "{} {} {} {} {}",
            self.txid, self.kind, self.from, self.to, self.amount
        );
        if let Some(issue) = &self.issue {
            words.push(' ');
            words.push_str(issue);
        }
        words
    }

    /// Reads the words written by [`log_words`](Self::log_words).
    pub fn from_log_words(words: &[&str]) -> Option<Plan> {
        let (txid, kind, from, to, amount) = match words {
            [t, k, f, to, a] | [t, k, f, to, a, _] => (t, k, f, to, a),
            _ => return None,
        };
        Some(Plan {
            txid: (*txid).to_owned(),
            kind: kind.parse().ok()?,
            from: (*from).to_owned(),
            to: (*to).to_owned(),
            amount: amount.parse().ok()?,
            issue: words.get(5).map(|s| (*s).to_owned()),
        })
    }

    /// The change of account `id` (in the store and collection it lives in).
    fn account(ns: &BankNs, id: &str) -> DocumentChange {
        if id.starts_with("acct-") {
            DocumentChange::update(ns.accounts(), id)
        } else {
            DocumentChange::update(ns.remote_accounts(), id).in_store(REMOTE)
        }
    }

    /// The changes of this transaction, in order: what leaves `from` (a
    /// guarded debit, or the voucher's delete), what reaches `to` (a credit,
    /// or the voucher's insert), the fee (merged into the debit when the fee
    /// account pays), and the ledger insert.
    pub fn changes(&self, ns: &BankNs) -> Vec<DocumentChange> {
        let mut changes = Vec::with_capacity(4);
        let fee_pays = self.from == FEES;
        if self.kind == Kind::Redeem {
            changes.push(
                DocumentChange::delete(ns.vouchers(), self.from.as_str())
                    .in_store(REMOTE)
                    .require_eq("issue", self.issue.clone().unwrap_or_default())
                    .require_eq("amount", self.amount),
            );
        } else if fee_pays {
            let net = self.amount - FEE;
            changes.push(
                Self::account(ns, FEES)
                    .inc("balance", -net)
                    .inc("count", 1_i64)
                    .require_gte("balance", net),
            );
        } else {
            changes.push(
                Self::account(ns, &self.from)
                    .inc("balance", -self.amount)
                    .require_gte("balance", self.amount),
            );
        }
        if self.kind == Kind::Issue {
            changes.push(
                DocumentChange::insert(
                    ns.vouchers(),
                    self.to.as_str(),
                    doc! { "amount": self.credit(), "issue": &self.txid, "from": &self.from },
                )
                .in_store(REMOTE),
            );
        } else {
            let mut credit = Self::account(ns, &self.to).inc("balance", self.credit());
            if self.kind == Kind::Payment {
                credit = credit
                    .inc("payments", 1_i64)
                    .set("lastPayment", self.txid.as_str());
            }
            changes.push(credit);
        }
        if !fee_pays {
            changes.push(
                Self::account(ns, FEES)
                    .inc("balance", FEE)
                    .inc("count", 1_i64),
            );
        }
        changes.push(DocumentChange::insert(
            ns.ledger(),
            self.txid.as_str(),
            self.ledger_entry(),
        ));
        changes
    }

    /// The tandem transaction of [`changes`](Self::changes), with id `txid`.
    pub fn transaction(&self, ns: &BankNs) -> Transaction {
        self.changes(ns).into_iter().fold(
            Transaction::with_id(self.txid.as_str()),
            Transaction::change,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_names_round_trip() {
        let spec = BankSpec::new(12, 100);
        assert_eq!(spec.initial_balance("acct-00011"), Some(100));
        assert_eq!(spec.initial_balance("acct-00012"), None);
        assert_eq!(spec.initial_balance("acct-11"), None);
        assert_eq!(spec.initial_balance("merchant-2"), Some(0));
        assert_eq!(spec.initial_balance("merchant-3"), None);
        assert_eq!(spec.initial_balance(FEES), Some(0));
        assert!(spec.is_merchant("merchant-0"));
        assert!(!spec.is_merchant("acct-00000"));
        assert!(spec.is_voucher("voucher-3"));
        assert!(!spec.is_voucher("voucher-4"));
        assert!(!spec.is_voucher("voucher-03"));
        assert_eq!(spec.home("acct-00001"), Some(Home::Local));
        assert_eq!(spec.home(FEES), Some(Home::Remote));
        assert_eq!(spec.home("voucher-0"), None);
        assert_eq!(spec.local_documents().len(), 12);
        assert_eq!(spec.remote_documents().len(), MERCHANTS + 1);
        assert_eq!(spec.account_ids().len(), 12 + MERCHANTS + 1);
        assert_eq!(spec.total(), 1200 + i128::from(VAULT_START));
        assert_eq!(spec.initial_balance(VAULT), Some(VAULT_START));
    }

    #[test]
    fn random_plans_are_well_formed() {
        let spec = BankSpec::new(2, 100);
        let mut rng = Rng::new(3);
        let mut kinds = std::collections::BTreeSet::new();
        let ns = BankNs::new("b");
        for i in 0..2000 {
            let txid = format!("t{i}");
            let p = match Plan::draw(&spec, &mut rng, txid.clone()) {
                Draw::Plan(p) => p,
                Draw::Voucher { voucher, blind } => {
                    let held = doc! { "_id": &voucher, "amount": 7_i64, "issue": "t0", "from": "acct-00000" };
                    let current = (!blind && i % 2 == 0).then_some(&held);
                    Plan::for_voucher(&spec, &mut rng, txid, &voucher, current)
                }
            };
            p.validate(&spec).unwrap();
            kinds.insert(p.kind);
            let fee_pays = p.from == FEES;
            assert_eq!(p.transaction(&ns).len(), if fee_pays { 3 } else { 4 });
            assert_eq!(Plan::from_entry(&p.txid, &p.ledger_entry()).unwrap(), p);
            let words = p.log_words();
            let words: Vec<&str> = words.split(' ').collect();
            assert_eq!(Plan::from_log_words(&words).unwrap(), p);
            for c in p.changes(&ns) {
                c.validate().unwrap();
            }
        }
        assert_eq!(kinds.len(), 5);
    }

    #[test]
    fn placeholders_are_not_vouchers() {
        let ghost = doc! { "_id": "voucher-0", META_FIELD: { "ghost": true } };
        assert_eq!(read_voucher(&ghost), None);
        let live =
            doc! { "_id": "voucher-0", "amount": 5_i64, "issue": "t1", "from": "acct-00000" };
        assert_eq!(
            read_voucher(&live),
            Some(("t1".into(), 5, "acct-00000".into()))
        );
    }

    #[test]
    fn the_hot_bound_grows_with_the_markers_only() {
        assert_eq!(hot_bound(0), HOT_BASE);
        assert_eq!(hot_bound(8), 4096 + 8 * MARKER_ENTRY_MAX);
    }
}
