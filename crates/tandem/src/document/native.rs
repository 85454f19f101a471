//! A [`DocumentChange`] inside a native multi-document transaction.

use bson::{doc, Bson, Document};

use super::{insert_expr, merge_conditions, CREDITS, GHOST, LOCK, ROOM};

use crate::change::{DocumentChange, DocumentOp, FieldOp};

/// One MongoDB command that makes a [`DocumentChange`] inside a native multi-document
/// transaction: no marker, no lock, but the same guards and the same respect for
/// documents held by two-phase transactions.
#[derive(Clone, Debug, PartialEq)]
pub enum NativeCommand {
    /// `updateOne(filter, update)`; matching nothing means a refusal to explain.
    Update {
        /// The guarded filter.
        filter: Document,
        /// The update.
        update: Document,
    },
    /// `deleteOne(placeholder)`, then `insertOne(doc)`: an insert takes over a
    /// placeholder of its `_id` (reserved by a two-phase insert and not
    /// filled), as a two-phase insert may; a duplicate key then means the
    /// document exists already.
    Insert {
        /// The full document, `_id` included.
        doc: Document,
        /// The filter of the placeholder the insert takes over, if there is
        /// one: its `_id`, not held.
        placeholder: Document,
    },
    /// `deleteOne(filter)`; deleting nothing means a refusal to explain.
    Delete {
        /// The guarded filter.
        filter: Document,
    },
}

/// The field operations `ops` as one update document, each under its
/// operator, as they take effect all at once.
pub(super) fn ops_update(ops: &[FieldOp]) -> Document {
    let mut update = Document::new();
    for op in ops {
        let (name, value) = match op {
            FieldOp::Set { value, .. } => ("$set", value.clone()),
            FieldOp::Unset { .. } => ("$unset", Bson::String(String::new())),
            FieldOp::Inc { by, .. } => ("$inc", by.clone()),
            FieldOp::Push { value, .. } => ("$push", value.clone()),
            FieldOp::Pull { value, .. } => ("$pull", super::statements::pull_condition(value)),
        };
        if !update.contains_key(name) {
            update.insert(name, Document::new());
        }
        if let Ok(body) = update.get_document_mut(name) {
            body.insert(op.path(), value);
        }
    }
    update
}

impl DocumentChange {
    /// The command that makes this change inside a native transaction.
    pub fn native_command(&self) -> NativeCommand {
        match &self.op {
            DocumentOp::Insert { doc } => {
                let mut full = doc! { "_id": self.id.clone() };
                full.extend(doc.clone());
                NativeCommand::Insert {
                    doc: full,
                    placeholder: doc! {
                        "_id": self.id.clone(),
                        GHOST: { "$exists": true },
                        LOCK: Bson::Null,
                    },
                }
            }
            DocumentOp::Delete => NativeCommand::Delete {
                filter: self.guarded_filter(None),
            },
            DocumentOp::Update { ops } => {
                let mut update = ops_update(ops);
                if self.is_exclusive() {
                    // As a two-phase exclusive apply: its filter says that no
                    // change is pending here, so every credit sum is zero;
                    // dropped, none outlives the field it was kept for (a
                    // `set` of `stats` would leave `stats.visits`' sum, and
                    // a later credit of `stats` could not count beside it).
                    if !update.contains_key("$unset") {
                        update.insert("$unset", Document::new());
                    }
                    if let Ok(body) = update.get_document_mut("$unset") {
                        body.insert(CREDITS, "");
                        body.insert(ROOM, "");
                    }
                }
                // An increment must leave room for the credits two-phase
                // transactions have pending on the field, which land later.
                let mut filter = self.guarded_filter(None);
                let incs = ops.iter().filter_map(|op| match op {
                    FieldOp::Inc { path, by } => Some((path.as_str(), by)),
                    _ => None,
                });
                // (The marker field is not read: a native change writes no
                // marker, so a field of the application's under the marker's
                // name does not stand in its way, as it does a two-phase
                // apply's push of its marker.)
                let (plain, mut exprs) = self.credit_room(incs);
                // And room for what two-phase transactions' clears and
                // undos add later (`room.rs`).
                // An exclusive change runs where nothing is pending, and so
                // nothing reserved: the store's own limit is all it meets.
                if !self.is_exclusive() {
                    exprs.extend(self.no_padding());
                    exprs.push(self.room_condition(super::room::update_growth(&update), 0));
                }
                merge_conditions(&mut filter, plain);
                // The same debits as the two-phase strategy refuses, for the
                // same declarations to get the same answers on either.
                merge_conditions(&mut filter, self.types_kept());
                merge_conditions(&mut filter, self.shapes_kept());
                merge_conditions(&mut filter, self.fields_reachable());
                insert_expr(&mut filter, exprs);
                NativeCommand::Update { filter, update }
            }
        }
    }
}
