use super::*;
use crate::record::ParticipantEntry;
use crate::Namespace;

#[test]
fn entries_are_stored_as_serde_writes_them() {
    let change = DocumentChange::update(Namespace::new("bank", "accounts"), "A")
        .inc("balance", -5_i64)
        .require_gte("balance", 5_i64);
    for before in [None, Some(doc! { "fields": [{ "path": "x", "value": 1 }] })] {
        let spec = change.spec().unwrap();
        let serde = bson::to_bson(&ParticipantEntry {
            kind: change.kind().to_owned(),
            label: change.label(),
            spec: spec.clone(),
            before: before.clone(),
        })
        .unwrap();
        assert_eq!(entry(&change, spec, before), serde);
    }
}
