//! The spec of a [`DocumentChange`] as a transaction record keeps it, built
//! directly when serde would write it unchanged.

use bson::{doc, Bson, Document};

use crate::change::{DocumentChange, DocumentOp, FieldOp, GuardOp};

/// Whether serde writes `value` back exactly as it is: the everyday types,
/// and documents and arrays of them. Others take the serde path.
fn plain(value: &Bson) -> bool {
    match value {
        Bson::Null
        | Bson::Boolean(_)
        | Bson::Int32(_)
        | Bson::Int64(_)
        | Bson::Double(_)
        | Bson::String(_) => true,
        Bson::Array(items) => items.iter().all(plain),
        Bson::Document(d) => plain_doc(d),
        _ => false,
    }
}

fn plain_doc(d: &Document) -> bool {
    d.values().all(plain)
}

impl DocumentChange {
    /// The spec exactly as serde writes it, built directly; `None` if a value
    /// is not [`plain`], for which serde is left to decide.
    pub(super) fn plain_spec(&self) -> Option<Document> {
        if !plain(&self.id) || !self.guards.iter().all(|g| plain(&g.value)) {
            return None;
        }
        let op = match &self.op {
            DocumentOp::Update { ops } => {
                let mut list = Vec::with_capacity(ops.len());
                for op in ops {
                    let entry = match op {
                        FieldOp::Set { path, value } => {
                            doc! { "op": "set", "path": path.as_str(), "value": plain(value).then(|| value.clone())? }
                        }
                        FieldOp::Unset { path } => doc! { "op": "unset", "path": path.as_str() },
                        FieldOp::Inc { path, by } => {
                            doc! { "op": "inc", "path": path.as_str(), "by": plain(by).then(|| by.clone())? }
                        }
                        FieldOp::Push { path, value } => {
                            doc! { "op": "push", "path": path.as_str(), "value": plain(value).then(|| value.clone())? }
                        }
                        FieldOp::Pull { path, value } => {
                            doc! { "op": "pull", "path": path.as_str(), "value": plain(value).then(|| value.clone())? }
                        }
                    };
                    list.push(Bson::Document(entry));
                }
                doc! { "type": "update", "ops": list }
            }
            DocumentOp::Insert { doc } => {
                if !plain_doc(doc) {
                    return None;
                }
                doc! { "type": "insert", "doc": doc.clone() }
            }
            DocumentOp::Delete => doc! { "type": "delete" },
        };
        let guards: Vec<Bson> = self
            .guards
            .iter()
            .map(|g| {
                let op = match g.op {
                    GuardOp::Eq => "eq",
                    GuardOp::Ne => "ne",
                    GuardOp::Gt => "gt",
                    GuardOp::Gte => "gte",
                    GuardOp::Lt => "lt",
                    GuardOp::Lte => "lte",
                    GuardOp::Exists => "exists",
                    GuardOp::Missing => "missing",
                };
                Bson::Document(doc! { "path": g.path.as_str(), "op": op, "value": g.value.clone() })
            })
            .collect();
        let mut spec = Document::new();
        if let Some(store) = &self.store {
            spec.insert("store", store.as_str());
        }
        spec.insert(
            "namespace",
            doc! { "db": self.namespace.db.as_str(), "collection": self.namespace.collection.as_str() },
        );
        spec.insert("id", self.id.clone());
        spec.insert("marker", self.marker.as_str());
        spec.insert("op", op);
        spec.insert("guards", guards);
        if self.counts_debits {
            spec.insert("countsDebits", true);
        }
        if self.missing_held_alone {
            spec.insert("missingHeldAlone", true);
        }
        if self.float_debits_held_alone {
            spec.insert("floatDebitsHeldAlone", true);
        }
        if self.reserves_room {
            spec.insert("reservesRoom", true);
        }
        if self.numbered_debits_held_alone {
            spec.insert("numberedDebitsHeldAlone", true);
        }
        if self.counts_marks {
            spec.insert("countsMarks", true);
        }
        Some(spec)
    }
}
