use super::*;
use crate::Namespace;

#[test]
fn plain_specs_are_what_serde_writes() {
    let ns = Namespace::new("bank", "accounts");
    let mut changes = vec![
        DocumentChange::update(ns.clone(), "A")
            .inc("balance", -100_i64)
            .require_gte("balance", 100_i64),
        DocumentChange::update(ns.clone(), 7_i32)
            .set("s", doc! { "a": [1, "x", null, 2.5] })
            .unset("u")
            .inc("n", 1.5)
            .push("list", "v")
            .pull("list", 3_i64),
        DocumentChange::insert(
            ns.clone(),
            "o1",
            doc! { "state": "UnPaid", "n": { "m": true } },
        ),
        DocumentChange::delete(ns.clone(), 9_i64),
    ];
    let mut stored = DocumentChange::update(ns.clone(), "B").set("x", 1);
    stored.store = Some("other".into());
    stored.marker = "pending".into();
    changes.push(stored);
    let mut guarded = DocumentChange::delete(ns, "G");
    for op in [
        GuardOp::Eq,
        GuardOp::Ne,
        GuardOp::Gt,
        GuardOp::Gte,
        GuardOp::Lt,
        GuardOp::Lte,
        GuardOp::Exists,
        GuardOp::Missing,
    ] {
        guarded.guards.push(crate::change::Guard {
            path: "g".into(),
            op,
            value: Bson::Int32(1),
        });
    }
    changes.push(guarded);
    for change in changes {
        let fast = change.plain_spec().expect("plain");
        assert_eq!(fast, bson::to_document(&change).unwrap(), "{change:?}");
        // The same bytes, key order included.
        assert_eq!(
            bson::to_vec(&fast).unwrap(),
            bson::to_vec(&bson::to_document(&change).unwrap()).unwrap()
        );
    }
}
