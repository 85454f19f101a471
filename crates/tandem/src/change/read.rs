//! Reading a change back from its spec (its serde form, as a transaction
//! record keeps it) by reference.
//!
//! Recovery rebuilds every participant of every record it drives. Through
//! serde that takes a copy of the whole spec first (bson's deserializer
//! consumes what it reads), then buffers each internally tagged enum, and
//! reads dates and decimals through their extended-JSON forms. This reader
//! walks the spec in place and copies only the values the change keeps.
//!
//! It is strict: it reads only the exact form that serializing a change
//! gives (every field of the right BSON type, no field it does not know),
//! and answers `None` for anything else, which the serde reader then judges,
//! naming what is wrong. So whatever it reads, serde reads the same (the
//! tests compare the two on generated changes and on mutations of their
//! specs).

use bson::{Bson, Document};

use super::{DocumentChange, DocumentOp, FieldOp, Guard, GuardOp, Origin};
use crate::store::Namespace;

impl DocumentChange {
    /// The change `spec` describes, if it has exactly the form serializing
    /// a change gives; `None` otherwise (read it with serde then, which
    /// tells what is wrong or reads what this does not).
    pub(crate) fn read_spec(spec: &Document) -> Option<DocumentChange> {
        let mut store = None;
        let mut namespace = None;
        let mut id = None;
        let mut marker = None;
        let mut op = None;
        let mut guards = Vec::new();
        let mut counts_debits = false;
        let mut missing_held_alone = false;
        let mut float_debits_held_alone = false;
        let mut reserves_room = false;
        let mut numbered_debits_held_alone = false;
        let mut counts_marks = false;
        for (key, value) in spec {
            match key.as_str() {
                "store" => {
                    store = match value {
                        Bson::String(s) => Some(s.clone()),
                        Bson::Null => None,
                        _ => return None,
                    }
                }
                "namespace" => namespace = Some(read_namespace(value)?),
                "id" => id = Some(plain(value)?.clone()),
                "marker" => marker = Some(string(value)?.to_owned()),
                "op" => op = Some(read_op(value)?),
                "guards" => {
                    guards = array(value)?
                        .iter()
                        .map(read_guard)
                        .collect::<Option<Vec<_>>>()?
                }
                "countsDebits" => counts_debits = flag(value)?,
                "missingHeldAlone" => missing_held_alone = flag(value)?,
                "floatDebitsHeldAlone" => float_debits_held_alone = flag(value)?,
                "reservesRoom" => reserves_room = flag(value)?,
                "numberedDebitsHeldAlone" => numbered_debits_held_alone = flag(value)?,
                "countsMarks" => counts_marks = flag(value)?,
                _ => return None,
            }
        }
        Some(DocumentChange {
            store,
            namespace: namespace?,
            id: id?,
            marker: marker?,
            op: op?,
            guards,
            counts_debits,
            missing_held_alone,
            float_debits_held_alone,
            reserves_room,
            numbered_debits_held_alone,
            counts_marks,
            errors: Vec::new(),
            origin: Origin::default(),
        })
    }
}

/// `value`, if it holds only the BSON types serde reads back as they are
/// (binary data of the generic subtype only) and no document with a key
/// starting with `$` (which serde would read as extended JSON, a date for
/// `{$date: …}`).
fn plain(value: &Bson) -> Option<&Bson> {
    let ok = match value {
        Bson::Document(d) => d
            .iter()
            .all(|(k, v)| !k.starts_with('$') && plain(v).is_some()),
        Bson::Array(a) => a.iter().all(|v| plain(v).is_some()),
        Bson::Double(_)
        | Bson::String(_)
        | Bson::Boolean(_)
        | Bson::Null
        | Bson::Int32(_)
        | Bson::Int64(_)
        | Bson::DateTime(_)
        | Bson::Decimal128(_)
        | Bson::ObjectId(_)
        | Bson::Timestamp(_) => true,
        Bson::Binary(b) => b.subtype == bson::spec::BinarySubtype::Generic,
        _ => false,
    };
    ok.then_some(value)
}

fn string(value: &Bson) -> Option<&str> {
    match value {
        Bson::String(s) => Some(s),
        _ => None,
    }
}

fn flag(value: &Bson) -> Option<bool> {
    match value {
        Bson::Boolean(b) => Some(*b),
        _ => None,
    }
}

fn array(value: &Bson) -> Option<&[Bson]> {
    match value {
        Bson::Array(a) => Some(a),
        _ => None,
    }
}

fn document(value: &Bson) -> Option<&Document> {
    match value {
        Bson::Document(d) => Some(d),
        _ => None,
    }
}

/// The fields of `value`, a document holding exactly `names` (in any
/// order), in the order of `names`.
fn fields<'v, const N: usize>(value: &'v Bson, names: [&str; N]) -> Option<[&'v Bson; N]> {
    let doc = document(value)?;
    if doc.len() != N {
        return None;
    }
    let mut found = [None; N];
    for (key, value) in doc {
        let at = names.iter().position(|n| n == key)?;
        found[at] = Some(value);
    }
    let mut out = [&Bson::Null; N];
    for (slot, value) in out.iter_mut().zip(found) {
        *slot = value?;
    }
    Some(out)
}

fn read_namespace(value: &Bson) -> Option<Namespace> {
    let [db, collection] = fields(value, ["db", "collection"])?;
    Some(Namespace {
        db: string(db)?.to_owned(),
        collection: string(collection)?.to_owned(),
    })
}

fn read_op(value: &Bson) -> Option<DocumentOp> {
    let doc = document(value)?;
    match string(doc.get("type")?)? {
        "update" => {
            let [_, ops] = fields(value, ["type", "ops"])?;
            let ops = array(ops)?
                .iter()
                .map(read_field_op)
                .collect::<Option<Vec<_>>>()?;
            Some(DocumentOp::Update { ops })
        }
        "insert" => {
            let [_, doc] = fields(value, ["type", "doc"])?;
            Some(DocumentOp::Insert {
                doc: document(plain(doc)?)?.clone(),
            })
        }
        "delete" => {
            fields(value, ["type"])?;
            Some(DocumentOp::Delete)
        }
        _ => None,
    }
}

fn read_field_op(value: &Bson) -> Option<FieldOp> {
    let doc = document(value)?;
    Some(match string(doc.get("op")?)? {
        "set" => {
            let [_, path, value] = fields(value, ["op", "path", "value"])?;
            FieldOp::Set {
                path: string(path)?.to_owned(),
                value: plain(value)?.clone(),
            }
        }
        "unset" => {
            let [_, path] = fields(value, ["op", "path"])?;
            FieldOp::Unset {
                path: string(path)?.to_owned(),
            }
        }
        "inc" => {
            let [_, path, by] = fields(value, ["op", "path", "by"])?;
            FieldOp::Inc {
                path: string(path)?.to_owned(),
                by: plain(by)?.clone(),
            }
        }
        "push" => {
            let [_, path, value] = fields(value, ["op", "path", "value"])?;
            FieldOp::Push {
                path: string(path)?.to_owned(),
                value: plain(value)?.clone(),
            }
        }
        "pull" => {
            let [_, path, value] = fields(value, ["op", "path", "value"])?;
            FieldOp::Pull {
                path: string(path)?.to_owned(),
                value: plain(value)?.clone(),
            }
        }
        _ => return None,
    })
}

fn read_guard(value: &Bson) -> Option<Guard> {
    let [path, op, compared] = fields(value, ["path", "op", "value"])?;
    let op = match string(op)? {
        "eq" => GuardOp::Eq,
        "ne" => GuardOp::Ne,
        "gt" => GuardOp::Gt,
        "gte" => GuardOp::Gte,
        "lt" => GuardOp::Lt,
        "lte" => GuardOp::Lte,
        "exists" => GuardOp::Exists,
        "missing" => GuardOp::Missing,
        _ => return None,
    };
    Some(Guard {
        path: string(path)?.to_owned(),
        op,
        value: plain(compared)?.clone(),
    })
}

#[cfg(test)]
mod tests {
    use bson::oid::ObjectId;
    use bson::{doc, Binary, Decimal128, Timestamp};
    use proptest::prelude::*;

    use super::*;

    fn scalar() -> impl Strategy<Value = Bson> {
        prop_oneof![
            any::<i32>().prop_map(Bson::Int32),
            any::<i64>().prop_map(Bson::Int64),
            (-1e12..1e12f64).prop_map(Bson::Double),
            Just(Bson::Double(f64::INFINITY)),
            Just(Bson::Double(-0.0)),
            "[a-z$.]{0,4}".prop_map(Bson::String),
            any::<bool>().prop_map(Bson::Boolean),
            Just(Bson::Null),
            any::<i64>().prop_map(|ms| Bson::DateTime(bson::DateTime::from_millis(ms))),
            any::<[u8; 16]>().prop_map(|b| Bson::Decimal128(Decimal128::from_bytes(b))),
            any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
            (any::<u32>(), any::<u32>())
                .prop_map(|(time, increment)| Bson::Timestamp(Timestamp { time, increment })),
            proptest::collection::vec(any::<u8>(), 0..4).prop_map(|bytes| {
                Bson::Binary(Binary {
                    subtype: bson::spec::BinarySubtype::Generic,
                    bytes,
                })
            }),
            Just(Bson::Binary(Binary {
                subtype: bson::spec::BinarySubtype::BinaryOld,
                bytes: vec![1, 2],
            })),
            Just(Bson::Binary(Binary {
                subtype: bson::spec::BinarySubtype::Uuid,
                bytes: vec![7; 16],
            })),
            Just(Bson::MaxKey),
            Just(Bson::Undefined),
            Just(Bson::Symbol("s".into())),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![Just("a"), Just("b"), Just("$date"), Just("$x")].prop_map(String::from)
    }

    fn value() -> impl Strategy<Value = Bson> {
        scalar().prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Bson::Array),
                proptest::collection::vec((key(), inner), 0..3)
                    .prop_map(|fields| Bson::Document(fields.into_iter().collect())),
            ]
        })
    }

    fn path() -> impl Strategy<Value = String> {
        prop_oneof![Just("a"), Just("b.c"), Just("items.0.qty")].prop_map(String::from)
    }

    fn field_op() -> impl Strategy<Value = FieldOp> {
        prop_oneof![
            (path(), value()).prop_map(|(path, value)| FieldOp::Set { path, value }),
            path().prop_map(|path| FieldOp::Unset { path }),
            (path(), value()).prop_map(|(path, by)| FieldOp::Inc { path, by }),
            (path(), value()).prop_map(|(path, value)| FieldOp::Push { path, value }),
            (path(), value()).prop_map(|(path, value)| FieldOp::Pull { path, value }),
        ]
    }

    fn guard() -> impl Strategy<Value = Guard> {
        let op = prop_oneof![
            Just(GuardOp::Eq),
            Just(GuardOp::Ne),
            Just(GuardOp::Gt),
            Just(GuardOp::Gte),
            Just(GuardOp::Lt),
            Just(GuardOp::Lte),
            Just(GuardOp::Exists),
            Just(GuardOp::Missing),
        ];
        (path(), op, value()).prop_map(|(path, op, value)| Guard { path, op, value })
    }

    fn change() -> impl Strategy<Value = DocumentChange> {
        let op = prop_oneof![
            proptest::collection::vec(field_op(), 0..4).prop_map(|ops| DocumentOp::Update { ops }),
            value().prop_map(|v| DocumentOp::Insert {
                doc: doc! { "v": v }
            }),
            Just(DocumentOp::Delete),
        ];
        (
            (
                proptest::option::of(Just("other".to_owned())),
                value(),
                op,
                proptest::collection::vec(guard(), 0..3),
            ),
            any::<[bool; 6]>(),
        )
            .prop_map(|((store, id, op, guards), flags)| {
                let mut change = DocumentChange::delete(Namespace::new("db", "c"), id);
                change.store = store;
                change.op = op;
                change.guards = guards;
                change.counts_debits = flags[0];
                change.missing_held_alone = flags[1];
                change.float_debits_held_alone = flags[2];
                change.reserves_room = flags[3];
                change.numbered_debits_held_alone = flags[4];
                change.counts_marks = flags[5];
                change
            })
    }

    fn by_serde(spec: &Document) -> Option<DocumentChange> {
        bson::from_document(spec.clone()).ok()
    }

    /// A way to spoil a spec somewhere: drop a field, give it another
    /// type, or add one nobody reads, at the top or one or two levels down.
    #[derive(Clone, Debug)]
    enum Spoil {
        Drop,
        Retype(Bson),
        Add,
    }

    fn spoil(doc: &mut Document, route: &[usize], how: &Spoil) {
        if doc.is_empty() {
            return;
        }
        let at = route[0] % doc.len();
        let key = doc.keys().nth(at).cloned().unwrap();
        if route.len() > 1 {
            match doc.get_mut(&key).unwrap() {
                Bson::Document(inner) => return spoil(inner, &route[1..], how),
                Bson::Array(items) if !items.is_empty() => {
                    let n = route[1] % items.len();
                    if let Bson::Document(inner) = &mut items[n] {
                        return spoil(inner, &route[1..], how);
                    }
                }
                _ => {}
            }
        }
        match how {
            Spoil::Drop => {
                doc.remove(&key);
            }
            Spoil::Retype(v) => {
                doc.insert(key, v.clone());
            }
            Spoil::Add => {
                doc.insert("unknown", 1);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Every change's spec reads back as the change, as serde reads
        /// it, or not at all (left to serde) where a value holds a type or
        /// a `$` key serde reads otherwise.
        #[test]
        fn a_spec_reads_back_as_serde_reads_it(change in change()) {
            let spec = bson::to_document(&change).unwrap();
            let read = DocumentChange::read_spec(&spec);
            let whole = Bson::Document(spec.clone());
            prop_assert_eq!(read.is_some(), plain(&whole).is_some(), "{}", spec);
            if let Some(read) = read {
                prop_assert_eq!(Some(read), by_serde(&spec), "{}", spec);
            }
        }

        /// Whatever a spoiled spec reads as, serde reads the same.
        #[test]
        fn a_spoiled_spec_reads_as_serde_reads_it_or_not_at_all(
            change in change(),
            route in proptest::collection::vec(any::<usize>(), 1..4),
            how in prop_oneof![
                Just(Spoil::Drop),
                Just(Spoil::Add),
                scalar().prop_map(Spoil::Retype),
            ],
        ) {
            let mut spec = bson::to_document(&change).unwrap();
            spoil(&mut spec, &route, &how);
            if let Some(read) = DocumentChange::read_spec(&spec) {
                prop_assert_eq!(Some(read), by_serde(&spec), "{}", spec);
            }
        }
    }

    /// The changes tandem builds read back here, not through serde: the
    /// saving is for them.
    #[test]
    fn built_changes_read_back_here() {
        let ns = Namespace::new("bank", "accounts");
        let changes = [
            DocumentChange::update(ns.clone(), "A")
                .inc("balance", -100_i64)
                .push(
                    "log",
                    doc! { "at": bson::DateTime::from_millis(5), "n": 1.5 },
                )
                .require_gte("balance", 100_i64),
            DocumentChange::insert(
                ns.clone(),
                7,
                doc! { "balance": Decimal128::from_bytes([1; 16]) },
            ),
            DocumentChange::delete(ns, ObjectId::from_bytes([3; 12])).in_store("other"),
        ];
        for change in changes {
            let spec = bson::to_document(&change).unwrap();
            assert_eq!(
                DocumentChange::read_spec(&spec).as_ref(),
                Some(&change),
                "{spec}"
            );
        }
    }
}
