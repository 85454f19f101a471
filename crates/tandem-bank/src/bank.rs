//! The bank: its accounts, its ledger, and the transactions the workers run.
//!
//! * `<db>.accounts` holds the customer accounts `acct-00000`, `acct-00001`, …
//!   (each starting with the initial balance) and the merchant accounts
//!   `merchant-0`, `merchant-1`, … (starting at zero, with a `payments` counter).
//! * `<db>.ledger` gets one document per committed transaction, inserted by the
//!   transaction itself as one of its participants: `{_id: <txid>, kind, from,
//!   to, amount}`. An undone insert leaves nothing; a placeholder holding only
//!   `_tandem: {ghost: true}` (an `_id` reserved by an insert that never filled
//!   it) is not a ledger entry.
//! * `<db>.transactions` holds tandem's transaction records.
//! * `<db>.meta` holds a token identifying the run (checked after each server restart).

use std::fmt;
use std::str::FromStr;

use bson::{doc, Document};
use tandem::{DocumentChange, Namespace, Transaction};

use crate::rng::Rng;

/// How many merchant accounts the bank has.
pub const MERCHANTS: usize = 3;

/// The largest amount of one transaction.
pub const MAX_AMOUNT: i64 = 50;

/// The most customer accounts a run may have.
pub const MAX_ACCOUNTS: usize = 10_000;

/// The shape of a bank: how many customers, and what each starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BankSpec {
    /// Customer accounts.
    pub customers: usize,
    /// Merchant accounts (they start at zero).
    pub merchants: usize,
    /// The initial balance of each customer.
    pub initial: i64,
}

impl BankSpec {
    /// A bank of `customers` customers starting with `initial` each, and [`MERCHANTS`] merchants.
    pub fn new(customers: usize, initial: i64) -> Self {
        BankSpec {
            customers,
            merchants: MERCHANTS,
            initial,
        }
    }

    /// The money in the bank, which no transaction may create or destroy.
    pub fn total(&self) -> i64 {
        self.customers as i64 * self.initial
    }

    /// The id of customer `i`.
    pub fn customer(i: usize) -> String {
        format!("acct-{i:05}")
    }

    /// The id of merchant `i`.
    pub fn merchant(i: usize) -> String {
        format!("merchant-{i}")
    }

    /// The initial balance of the account `id`, if the bank has it.
    pub fn initial_balance(&self, id: &str) -> Option<i64> {
        if let Some(n) = id.strip_prefix("acct-") {
            let i: usize = n.parse().ok()?;
            (i < self.customers && id == Self::customer(i)).then_some(self.initial)
        } else if let Some(n) = id.strip_prefix("merchant-") {
            let i: usize = n.parse().ok()?;
            (i < self.merchants && id == Self::merchant(i)).then_some(0)
        } else {
            None
        }
    }

    /// Whether `id` names a merchant of this bank.
    pub fn is_merchant(&self, id: &str) -> bool {
        id.starts_with("merchant-") && self.initial_balance(id).is_some()
    }

    /// Every account document as seeded, customers first.
    pub fn seed_documents(&self) -> Vec<Document> {
        let customers = (0..self.customers).map(|i| {
            doc! { "_id": Self::customer(i), "balance": self.initial, "pendingTransactions": [] }
        });
        let merchants = (0..self.merchants).map(|i| {
            doc! {
                "_id": Self::merchant(i),
                "balance": 0_i64,
                "payments": 0_i64,
                "pendingTransactions": [],
            }
        });
        customers.chain(merchants).collect()
    }
}

/// Where the bank's collections live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BankNs {
    /// The database.
    pub db: String,
}

impl BankNs {
    /// The collections of database `db`.
    pub fn new(db: impl Into<String>) -> Self {
        BankNs { db: db.into() }
    }

    /// The accounts.
    pub fn accounts(&self) -> Namespace {
        Namespace::new(&self.db, "accounts")
    }

    /// The ledger of committed transactions.
    pub fn ledger(&self) -> Namespace {
        Namespace::new(&self.db, "ledger")
    }

    /// tandem's transaction records.
    pub fn records(&self) -> Namespace {
        Namespace::new(&self.db, "transactions")
    }

    /// The run's own bookkeeping (a token that identifies the run's server).
    pub fn meta(&self) -> Namespace {
        Namespace::new(&self.db, "meta")
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
    /// Merchant to customer.
    Payout,
}

impl Kind {
    /// The word stored in the ledger and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Transfer => "transfer",
            Kind::Payment => "payment",
            Kind::Payout => "payout",
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
            other => Err(format!("unknown transaction kind {other:?}")),
        }
    }
}

/// One planned transaction: `amount` moves from `from` to `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The transaction id, also the ledger document's `_id`.
    pub txid: String,
    /// What it is.
    pub kind: Kind,
    /// The account debited.
    pub from: String,
    /// The account credited.
    pub to: String,
    /// The amount, `1..=MAX_AMOUNT`.
    pub amount: i64,
}

impl Plan {
    /// A random transaction with id `txid`: 60 % transfers, 25 % payments, 15 % payouts.
    pub fn random(spec: &BankSpec, rng: &mut Rng, txid: String) -> Plan {
        let amount = rng.range(1, MAX_AMOUNT as u64) as i64;
        let customer = |rng: &mut Rng| BankSpec::customer(rng.index(spec.customers));
        let merchant = |rng: &mut Rng| BankSpec::merchant(rng.index(spec.merchants));
        let roll = rng.below(100);
        let (kind, from, to) = if roll < 60 && spec.customers >= 2 {
            let a = rng.index(spec.customers);
            let b = (a + 1 + rng.index(spec.customers - 1)) % spec.customers;
            (Kind::Transfer, BankSpec::customer(a), BankSpec::customer(b))
        } else if roll < 85 {
            (Kind::Payment, customer(rng), merchant(rng))
        } else {
            (Kind::Payout, merchant(rng), customer(rng))
        };
        Plan {
            txid,
            kind,
            from,
            to,
            amount,
        }
    }

    /// The ledger document this transaction inserts (without `_id`).
    pub fn ledger_entry(&self) -> Document {
        doc! {
            "kind": self.kind.as_str(),
            "from": &self.from,
            "to": &self.to,
            "amount": self.amount,
        }
    }

    /// The changes of this transaction: a guarded debit, a credit, and the ledger insert.
    pub fn changes(&self, ns: &BankNs) -> Vec<DocumentChange> {
        let debit = DocumentChange::update(ns.accounts(), self.from.as_str())
            .inc("balance", -self.amount)
            .require_gte("balance", self.amount);
        let mut credit =
            DocumentChange::update(ns.accounts(), self.to.as_str()).inc("balance", self.amount);
        if self.kind == Kind::Payment {
            credit = credit
                .inc("payments", 1_i64)
                .set("lastPayment", self.txid.as_str());
        }
        let entry = DocumentChange::insert(ns.ledger(), self.txid.as_str(), self.ledger_entry());
        vec![debit, credit, entry]
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
        assert!(spec.is_merchant("merchant-0"));
        assert!(!spec.is_merchant("acct-00000"));
        assert_eq!(spec.seed_documents().len(), 12 + MERCHANTS);
        assert_eq!(spec.total(), 1200);
    }

    #[test]
    fn random_plans_are_well_formed() {
        let spec = BankSpec::new(2, 100);
        let mut rng = Rng::new(3);
        let mut kinds = std::collections::BTreeSet::new();
        for i in 0..1000 {
            let p = Plan::random(&spec, &mut rng, format!("t{i}"));
            assert_ne!(p.from, p.to);
            assert!((1..=MAX_AMOUNT).contains(&p.amount));
            assert!(spec.initial_balance(&p.from).is_some());
            assert!(spec.initial_balance(&p.to).is_some());
            kinds.insert(p.kind);
            assert_eq!(p.transaction(&BankNs::new("b")).len(), 3);
        }
        assert_eq!(kinds.len(), 3);
    }
}
