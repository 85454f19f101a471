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

/// Everything a record holds beside its participant entries fits in the
/// room [`MAX_RECORD_ENTRIES_LEN`] leaves: a full history of the longest
/// notes under the longest owner names, the longest `lastError`, the
/// longest `_id`, with 16 KiB to spare for the record's fixed fields (about
/// twenty dates, numbers and short strings).
#[test]
fn a_full_history_fits_beside_the_largest_entries() {
    use crate::error::{clip, HISTORY_TEXT_LIMIT, OWNER_LIMIT, RECORD_TEXT_LIMIT};
    let owner = format!(
        "{}-recovery-{}",
        "o".repeat(OWNER_LIMIT),
        bson::oid::ObjectId::new().to_hex()
    );
    let note = clip("n".repeat(1 << 20), HISTORY_TEXT_LIMIT);
    let line = crate::engine::history(TxState::Canceling, &owner, i64::MAX, &note);
    let lines = vec![line; crate::engine::HISTORY_KEPT as usize];
    let rest = doc! {
        "_id": "i".repeat(TxId::MAX_LEN),
        "history": lines,
        "lastError": clip("e".repeat(1 << 20), RECORD_TEXT_LIMIT),
    };
    let rest = crate::query::size::document_len(&rest);
    assert!(
        rest + 16 * 1024 <= 16 * 1024 * 1024 - MAX_RECORD_ENTRIES_LEN,
        "{rest} bytes"
    );
}

/// The entries' length counts the array's keys, which a record of many
/// participants pays for too.
#[test]
fn the_entries_length_counts_the_array_keys() {
    let entries: Vec<Bson> = (0..1000).map(|i| Bson::Document(doc! { "i": i })).collect();
    let array = doc! { "participants": entries.clone() };
    // The array's own length (4), its terminator (1), and the field's
    // type byte and name.
    let framing = 4 + 1 + 1 + "participants".len() + 1;
    assert_eq!(
        entries_len(&entries) + framing + 5,
        crate::query::size::document_len(&array)
    );
}
