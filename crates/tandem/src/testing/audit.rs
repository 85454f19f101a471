//! [`audit`]: the invariants every run must end with.

use std::collections::{BTreeMap, HashMap};

use bson::{doc, Bson, Document};

use crate::change::{DocumentChange, DocumentOp, FieldOp, META_FIELD};
use crate::query;
use crate::record::{TxRecord, TxState};
use crate::store::{FindOptions, Namespace, Store, StoreError};

/// What [`audit`] found.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    /// Every transaction record.
    pub records: Vec<TxRecord>,
    /// Every broken invariant, described.
    pub violations: Vec<String>,
}

impl Audit {
    /// How many records ended in `state`.
    pub fn count(&self, state: TxState) -> usize {
        self.records.iter().filter(|r| r.state == state).count()
    }

    /// Panics with every violation if there is any.
    pub fn assert_clean(&self) {
        assert!(
            self.violations.is_empty(),
            "{} violation(s):\n{}",
            self.violations.len(),
            self.violations.join("\n")
        );
    }
}

/// A numeric field of one document, as a key of the expected-totals ledger.
pub type FieldKey = (Namespace, String, String);

fn id_text(id: &Bson) -> String {
    match id {
        Bson::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn as_f64(b: &Bson) -> Option<f64> {
    match b {
        Bson::Int32(i) => Some(f64::from(*i)),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        // The nearest double: the audit sums amounts as doubles, to within 1e-9.
        Bson::Decimal128(d) => d.to_string().parse().ok(),
        _ => None,
    }
}

/// Checks the invariants a run must end with.
///
/// * every record in `records_ns` is `done` or `canceled`;
/// * no document of `documents` has a marker entry (in any marker field the
///   records name), a pending count, a count of markers by marker field
///   or in all (`_tandem.marks`, `_tandem.marked`), room reserved for a
///   clear or an undo (`_tandem.room`), or a `_tandem.lock`;
/// * every numeric field in `initial` equals its initial value plus the
///   increments of the `done` transactions, so nothing was applied twice, lost,
///   or left uncompensated.
///
/// `initial` holds the documents as they were before the run.
pub async fn audit(
    store: &dyn Store,
    records_ns: &Namespace,
    initial: &[(Namespace, Document)],
) -> Result<Audit, StoreError> {
    let mut result = Audit::default();
    for doc in store
        .find(records_ns, doc! {}, FindOptions::default())
        .await?
    {
        match TxRecord::from_document(doc) {
            Ok(r) => result.records.push(r),
            Err(e) => result.violations.push(format!("unreadable record: {e}")),
        }
    }
    let mut markers = vec![crate::change::DEFAULT_MARKER.to_owned()];
    let mut namespaces: Vec<Namespace> = initial.iter().map(|(ns, _)| ns.clone()).collect();
    let mut expected: BTreeMap<FieldKey, f64> = BTreeMap::new();
    for (ns, doc) in initial {
        let id = doc.get("_id").map(id_text).unwrap_or_default();
        collect_numbers(doc, "", &mut |path, v| {
            expected.insert((ns.clone(), id.clone(), path), v);
        });
    }
    for record in &result.records {
        if !record.state.is_terminal() {
            result.violations.push(format!(
                "transaction {} left in state {}",
                record.id, record.state
            ));
        }
        for entry in &record.participants {
            let Ok(change) = bson::from_document::<DocumentChange>(entry.spec.clone()) else {
                continue;
            };
            if !markers.contains(&change.marker) {
                markers.push(change.marker.clone());
            }
            namespaces.push(change.namespace.clone());
            if record.state != TxState::Done {
                continue;
            }
            if let DocumentOp::Update { ops } = &change.op {
                for op in ops {
                    if let FieldOp::Inc { path, by } = op {
                        let key = (change.namespace.clone(), id_text(&change.id), path.clone());
                        if let (Some(total), Some(by)) = (expected.get_mut(&key), as_f64(by)) {
                            *total += by;
                        }
                    }
                }
            }
        }
    }
    namespaces.sort();
    namespaces.dedup();
    let mut actual: HashMap<FieldKey, f64> = HashMap::new();
    for ns in &namespaces {
        for doc in store.find(ns, doc! {}, FindOptions::default()).await? {
            let id = doc.get("_id").map(id_text).unwrap_or_default();
            for marker in &markers {
                if let Some(Bson::Array(list)) = doc.get(marker) {
                    if !list.is_empty() {
                        result
                            .violations
                            .push(format!("{ns}/{id} keeps markers {list:?}"));
                    }
                }
            }
            if let Some(n) = query::lookup(&doc, &format!("{META_FIELD}.pending"))
                .filter(|n| !matches!(n, Bson::Int32(0) | Bson::Int64(0)))
            {
                result
                    .violations
                    .push(format!("{ns}/{id} counts {n} pending transaction(s)"));
            }
            // Every clear and undo gives back what its apply reserved: a
            // reservation left over would hold room nobody uses, for ever.
            if let Some(n) = query::lookup(&doc, &format!("{META_FIELD}.room"))
                .filter(|n| !matches!(n, Bson::Int32(0) | Bson::Int64(0)))
            {
                result
                    .violations
                    .push(format!("{ns}/{id} keeps {n} bytes of room reserved"));
            }
            // The counts of markers by marker field, and their total, move
            // with the pending count: at rest every one is zero.
            if let Some(n) = query::lookup(&doc, &format!("{META_FIELD}.marked"))
                .filter(|n| !matches!(n, Bson::Int32(0) | Bson::Int64(0)))
            {
                result
                    .violations
                    .push(format!("{ns}/{id} counts {n} marker(s) in all"));
            }
            if let Some(Bson::Document(marks)) = query::lookup(&doc, &format!("{META_FIELD}.marks"))
            {
                for (field, n) in marks {
                    if !matches!(n, Bson::Int32(0) | Bson::Int64(0)) {
                        result
                            .violations
                            .push(format!("{ns}/{id} counts {n} marker(s) in {field}"));
                    }
                }
            }
            if let Some(lock) = query::lookup(&doc, &format!("{META_FIELD}.lock")) {
                result
                    .violations
                    .push(format!("{ns}/{id} keeps lock {lock}"));
            }
            collect_numbers(&doc, "", &mut |path, v| {
                actual.insert((ns.clone(), id.clone(), path), v);
            });
        }
    }
    for (key, want) in &expected {
        match actual.get(key) {
            Some(got) if (got - want).abs() < 1e-9 => {}
            got => result.violations.push(format!(
                "{}/{} field {}: expected {want}, found {got:?}",
                key.0, key.1, key.2
            )),
        }
    }
    Ok(result)
}

fn collect_numbers(doc: &Document, prefix: &str, out: &mut dyn FnMut(String, f64)) {
    for (k, v) in doc {
        if k == META_FIELD {
            continue;
        }
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Bson::Document(d) => collect_numbers(d, &path, out),
            other => {
                if let Some(n) = as_f64(other) {
                    out(path, n);
                }
            }
        }
    }
}
