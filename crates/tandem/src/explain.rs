//! What a transaction would do, before it runs: [`Coordinator::explain`]
//! and [`Transaction::explain`].

use std::fmt;

use bson::Bson;

use crate::change::{DocumentChange, DocumentOp, FieldOp};
use crate::config::{CoordinatorConfig, Strategy};
use crate::coordinator::{Coordinator, Item, Transaction};

/// A transaction's plan: how it would run and why, and for each participant
/// its change, its undo, its guards, and how it holds its document.
/// `Display` prints it; [`mermaid`](Self::mermaid) draws its state diagram.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Plan {
    /// The strategy it would run with.
    pub strategy: Strategy,
    /// Why that strategy.
    pub reason: String,
    /// Its participants, in order.
    pub participants: Vec<PlannedParticipant>,
    /// The indexes the strategy relies on (created by
    /// [`Coordinator::ensure_indexes`]), as `namespace {keys}`.
    pub indexes: Vec<String>,
}

/// One participant of a [`Plan`].
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PlannedParticipant {
    /// Its position, from 0.
    pub index: usize,
    /// Its label, e.g. `shop.coupons/SPRING`.
    pub label: String,
    /// What the apply does (or the whole change, natively).
    pub forward: Vec<String>,
    /// What happens at commit, when its marker is cleared (empty natively).
    pub at_commit: Vec<String>,
    /// How a cancel undoes it (derived; nothing to write by hand). Empty
    /// natively: a refusal aborts the transaction, and nothing was written.
    pub undo: Vec<String>,
    /// Its guards, checked at apply.
    pub guards: Vec<String>,
    /// `"exclusively"` or `"shared"`: whether other transactions may change
    /// the document while this one is pending.
    pub holds: &'static str,
}

fn value(b: &Bson) -> String {
    b.clone().into_relaxed_extjson().to_string()
}

fn negated(by: &Bson) -> String {
    match by {
        Bson::Int32(i) => i.saturating_neg().to_string(),
        Bson::Int64(i) => i.saturating_neg().to_string(),
        Bson::Double(d) => (-d).to_string(),
        Bson::Decimal128(d) => value(&Bson::Decimal128(crate::document::negate_decimal(d))),
        other => format!("-{}", value(other)),
    }
}

/// What a change does inside one native transaction: every operation at
/// once, nothing at commit, and no undo (a refusal aborts the transaction).
fn native_steps(change: &DocumentChange) -> Vec<String> {
    match &change.op {
        DocumentOp::Update { ops } => ops
            .iter()
            .map(|op| match op {
                FieldOp::Inc { path, by } => format!("add {} to {path}", value(by)),
                FieldOp::Set { path, value: v } => format!("set {path} = {}", value(v)),
                FieldOp::Unset { path } => format!("unset {path}"),
                FieldOp::Push { path, value: v } => format!("push {} to {path}", value(v)),
                FieldOp::Pull { path, value: v } => format!("pull {} from {path}", value(v)),
            })
            .collect(),
        DocumentOp::Insert { .. } => {
            vec!["insert the document (taking over a placeholder of its _id)".into()]
        }
        DocumentOp::Delete => vec!["delete the document".into()],
    }
}

fn plan_change(index: usize, change: &DocumentChange, default_db: &str) -> PlannedParticipant {
    let mut forward = Vec::new();
    let mut at_commit = Vec::new();
    let mut undo = Vec::new();
    match &change.op {
        DocumentOp::Update { ops } => {
            for op in ops {
                let early = change.applies_early(op);
                match op {
                    FieldOp::Inc { path, by } if early && change.is_exclusive() => {
                        forward.push(format!("add {} to {path}", value(by)));
                        undo.push(format!(
                            "restore {path} from the before-image, if it still holds it plus {} (else add {}; a sum past the 64-bit range, or a double with a decimal, is restored without that check)",
                            value(by),
                            negated(by)
                        ));
                    }
                    FieldOp::Inc { path, by } if early => {
                        forward.push(format!("add {} to {path}", value(by)));
                        undo.push(format!("add {} to {path}", negated(by)));
                    }
                    FieldOp::Inc {
                        path,
                        by: by @ Bson::Double(_),
                    } => {
                        forward.push(format!(
                            "check that {path} is a double, a decimal or missing (on an integer, a debit pending there could not be undone exactly once this credit lands)"
                        ));
                        at_commit.push(format!("add {} to {path}", value(by)));
                        undo.push(format!("nothing for {path}: the credit never landed"));
                    }
                    FieldOp::Inc {
                        path,
                        by: by @ Bson::Decimal128(_),
                    } => {
                        forward.push(format!(
                            "check that {path} is a decimal, an integer or missing (on a double, a debit pending there could not be undone exactly once this credit lands)"
                        ));
                        at_commit.push(format!("add {} to {path}", value(by)));
                        undo.push(format!("nothing for {path}: the credit never landed"));
                    }
                    FieldOp::Inc { path, by } => {
                        forward.push(format!(
                            "check that {} more fits in {path} with the credits pending on it",
                            value(by)
                        ));
                        at_commit.push(format!("add {} to {path}", value(by)));
                        undo.push(format!("nothing for {path}: the credit never landed"));
                    }
                    FieldOp::Set { path, value: v } => {
                        forward.push(format!("set {path} = {}", value(v)));
                        undo.push(format!(
                            "restore {path} from the before-image, if it still holds {}",
                            value(v)
                        ));
                    }
                    FieldOp::Unset { path } => {
                        forward.push(format!("unset {path}"));
                        undo.push(match path.rsplit_once('.') {
                            // `image_root`: the sub-document, up to 16 KiB, whole.
                            Some((parent, _)) => format!(
                                "restore {parent} (the sub-document holding {path}, up to 16 KiB; else {path} alone) from the before-image, field order kept, if {path} is still unset"
                            ),
                            None => format!(
                                "restore {path} from the before-image, if it is still unset"
                            ),
                        });
                    }
                    FieldOp::Push { path, value: v } => {
                        forward.push(format!("push {} to {path}", value(v)));
                        undo.push(format!("restore {path} from the before-image"));
                    }
                    FieldOp::Pull { path, value: v } => {
                        forward.push(format!("pull {} from {path}", value(v)));
                        undo.push(format!("restore {path} from the before-image"));
                    }
                }
            }
        }
        DocumentOp::Insert { .. } => {
            forward.push(
                "reserve the _id with a placeholder while preparing, fill it at apply".into(),
            );
            undo.push("delete the document (the _id is free again)".into());
        }
        DocumentOp::Delete => {
            forward.push("lock the document and mark it deleting".into());
            at_commit.push("delete the document".into());
            undo.push("unlock it".into());
        }
    }
    PlannedParticipant {
        index,
        // A change that names no database runs in the coordinator's default one.
        label: if change.namespace.db.is_empty() {
            let mut named = change.clone();
            named.namespace.db = default_db.to_owned();
            named.label()
        } else {
            change.label()
        },
        forward,
        at_commit,
        undo,
        guards: change.guards.iter().map(ToString::to_string).collect(),
        holds: if change.is_exclusive() {
            "exclusively"
        } else {
            "shared"
        },
    }
}

impl Coordinator {
    /// The plan of `tx`: which strategy would run it and why, and what each
    /// participant's apply, commit and undo would do. Nothing is read or
    /// written; `tx` is not validated (running it does that).
    pub fn explain(&self, tx: &Transaction) -> Plan {
        let (strategy, reason) = match tx.strategy.unwrap_or(self.config().strategy) {
            Strategy::Auto => self.choose(tx),
            s if tx.strategy.is_some() => (s, "asked for by the transaction".to_owned()),
            s => (s, "the coordinator's default".to_owned()),
        };
        let config = self.config();
        plan(tx, strategy, reason, &config.database, &config.collection)
    }
}

impl Transaction {
    /// The plan of this transaction as a coordinator with the default
    /// settings ([`CoordinatorConfig::default`]) would run it, without one:
    /// the same as [`Coordinator::explain`], except that
    /// [`Strategy::Auto`] stays undecided (the choice needs the stores) and
    /// the records are in the default database. Nothing is read or written.
    pub fn explain(&self) -> Plan {
        let config = CoordinatorConfig::default();
        let (strategy, reason) = match self.strategy.unwrap_or(config.strategy) {
            Strategy::Auto => (
                Strategy::Auto,
                "decided when it runs: natively if every participant is on one store that \
                 supports transactions and the change fits the native limits, else two-phase"
                    .to_owned(),
            ),
            s if self.strategy.is_some() => (s, "asked for by the transaction".to_owned()),
            s => (s, "the coordinator's default".to_owned()),
        };
        plan(self, strategy, reason, &config.database, &config.collection)
    }
}

fn plan(
    tx: &Transaction,
    strategy: Strategy,
    reason: String,
    database: &str,
    collection: &str,
) -> Plan {
    let records = format!("{database}.{collection}");
    let participants = tx
        .items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Item::Document(change) if strategy == Strategy::Native => PlannedParticipant {
                forward: native_steps(change),
                at_commit: Vec::new(),
                undo: Vec::new(),
                ..plan_change(i, change, database)
            },
            Item::Document(change) => plan_change(i, change, database),
            Item::Custom(p) => PlannedParticipant {
                index: i,
                label: p.label(),
                forward: vec![format!(
                    "a hand-written participant of kind {:?}: its apply",
                    p.kind()
                )],
                at_commit: vec!["its clear_marker".into()],
                undo: vec!["its compensate".into()],
                guards: Vec::new(),
                holds: "as it defines",
            },
        })
        .collect();
    let indexes = match strategy {
        Strategy::Native => Vec::new(),
        _ => vec![format!("{records} {{state: 1, lastModified: 1}}")],
    };
    Plan {
        strategy,
        reason,
        participants,
        indexes,
    }
}

impl Plan {
    /// Its state diagram in Mermaid (`stateDiagram-v2`).
    pub fn mermaid(&self) -> String {
        match self.strategy {
            Strategy::Native => "stateDiagram-v2\n    [*] --> running: start a session transaction\n    running --> committed: every change applied, commit\n    running --> aborted: a refusal or a store error\n    committed --> [*]\n    aborted --> [*]\n".to_owned(),
            _ => "stateDiagram-v2\n    [*] --> pending: write the record (every participant)\n    pending --> applied: every apply landed (commit point)\n    pending --> canceling: a refusal, or recovery after the lease\n    applied --> done: markers cleared, credits landed\n    canceling --> canceled: every apply undone\n    done --> [*]\n    canceled --> [*]\n".to_owned(),
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "strategy: {:?} ({})", self.strategy, self.reason)?;
        for p in &self.participants {
            writeln!(
                f,
                "{}. {} (holds its document {})",
                p.index, p.label, p.holds
            )?;
            for g in &p.guards {
                writeln!(f, "   guard:     {g}")?;
            }
            for s in &p.forward {
                writeln!(f, "   apply:     {s}")?;
            }
            for s in &p.at_commit {
                writeln!(f, "   at commit: {s}")?;
            }
            for s in &p.undo {
                writeln!(f, "   undo:      {s}")?;
            }
        }
        for i in &self.indexes {
            writeln!(f, "index: {i}")?;
        }
        Ok(())
    }
}
