use super::*;
use crate::record::ParticipantEntry;
use crate::Namespace;

#[test]
fn entries_are_stored_as_serde_writes_them() {
    let change = DocumentChange::update(Namespace::new("bank", "accounts"), "A")
        .inc("balance", -5_i64)
        .require_gte("balance", 5_i64);
    let own = TxId::new("t1#0123456789ab/2").unwrap();
    for before in [None, Some(doc! { "fields": [{ "path": "x", "value": 1 }] })] {
        for (marker, uid) in [(None, None), (Some(&own), Some("0123456789abcdef01234567"))] {
            let spec = change.spec().unwrap();
            let serde = bson::to_bson(&ParticipantEntry {
                kind: change.kind().to_owned(),
                label: change.label(),
                spec: spec.clone(),
                before: before.clone(),
                marker: marker.map(|m| m.as_str().to_owned()),
                store_uid: uid.map(str::to_owned),
            })
            .unwrap();
            assert_eq!(entry(&change, spec, before.clone(), marker, uid), serde);
        }
    }
}
