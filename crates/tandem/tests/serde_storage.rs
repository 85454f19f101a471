//! Typed changes store what serde stores: `unset_f()` writes `None` as the
//! struct would (left out where serde leaves it out, through a `with`
//! module where one writes it), so documents written by `insert` and by
//! `unset_f` are alike, and the struct reads `None` back. (A review of the
//! earlier change found `null` written where serde leaves `None` out, which
//! a `$exists: false` query or a sparse index tells apart.)

use bson::{doc, Bson};
use serde::{Deserialize, Serialize};
use tandem::{participant, Coordinator, DocumentChange, MemoryStore, Namespace, Transaction};

fn coordinator() -> Coordinator {
    Coordinator::builder(MemoryStore::new())
        .commit_point(tandem::CommitPoint::Done)
        .build()
}

#[participant(collection = "users")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct User {
    #[serde(rename = "_id")]
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    email: Option<String>,
    nick: Option<String>,
}

#[test]
fn unset_removes_a_field_serde_leaves_out_and_nulls_one_it_writes() {
    let typed = User::change("u").unset_email().unset_nick();
    let by_hand = DocumentChange::update(Namespace::new("", "users"), "u")
        .unset("email")
        .set("nick", Bson::Null);
    assert_eq!(DocumentChange::from(typed), by_hand);
}

#[tokio::test]
async fn unset_and_insert_store_none_alike() {
    let c = coordinator();
    let a = User {
        id: "a".into(),
        email: None,
        nick: None,
    };
    let b = User {
        id: "b".into(),
        email: Some("b@x".into()),
        nick: Some("bee".into()),
    };
    c.run(Transaction::new().change(a.insert()).change(b.insert()))
        .await
        .unwrap();
    c.run(Transaction::new().change(User::change("b").unset_email().unset_nick()))
        .await
        .unwrap();
    let without = User::find(&c, doc! { "email": { "$exists": false } })
        .await
        .unwrap();
    assert_eq!(without.len(), 2, "{without:?}");
    let null = User::find(&c, doc! { "nick": { "$type": "null" } })
        .await
        .unwrap();
    assert_eq!(null.len(), 2, "{null:?}");
}

/// A `with` module that stores `None` as an empty string.
mod empty_as_none {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(v.as_deref().unwrap_or(""))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let s = String::deserialize(d)?;
        Ok((!s.is_empty()).then_some(s))
    }
}

#[participant(collection = "notes")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Note {
    #[serde(rename = "_id")]
    id: String,
    #[serde(with = "empty_as_none")]
    text: Option<String>,
    n: i64,
}

/// Such a field has no presence guards (they would compare with `null`);
/// its equality guard goes through the module and follows what the
/// struct reads.
#[tokio::test]
async fn a_none_stored_through_a_module_is_guarded_by_equality() {
    let c = coordinator();
    let note = Note {
        id: "N".into(),
        text: Some("hi".into()),
        n: 0,
    };
    c.run(Transaction::new().change(note.insert()))
        .await
        .unwrap();
    c.run(Transaction::new().change(Note::change("N").unset_text()))
        .await
        .unwrap();
    assert_eq!(Note::get(&c, "N").await.unwrap().unwrap().text, None);
    c.run(Transaction::new().change(Note::change("N").inc_n(1).require_text_eq(None)))
        .await
        .unwrap();
    let refused = c
        .run(Transaction::new().change(Note::change("N").inc_n(1).require_text_ne(None)))
        .await;
    assert!(refused.is_err(), "{refused:?}");
}

/// `set_f(None)` stores `None` as serde does too: where serde leaves it
/// out, the field is removed, so that a document set to `None` by a typed
/// change and one inserted with `None` are alike. (A review found `null`
/// written there, which `$exists: false` and a sparse index tell apart
/// from the documents serde writes.)
#[tokio::test]
async fn set_to_none_removes_a_field_serde_leaves_out() {
    let typed = User::change("u").set_email(None).set_nick(None);
    let by_hand = DocumentChange::update(Namespace::new("", "users"), "u")
        .unset("email")
        .set("nick", Bson::Null);
    assert_eq!(DocumentChange::from(typed), by_hand);
    let some = User::change("u").set_email(Some("u@x".to_owned()));
    let by_hand = DocumentChange::update(Namespace::new("", "users"), "u").set("email", "u@x");
    assert_eq!(DocumentChange::from(some), by_hand);

    let c = coordinator();
    let a = User {
        id: "a".into(),
        email: None,
        nick: None,
    };
    let b = User {
        id: "b".into(),
        email: Some("b@x".into()),
        nick: None,
    };
    c.run(Transaction::new().change(a.insert()).change(b.insert()))
        .await
        .unwrap();
    let new_email: Option<String> = None;
    c.run(Transaction::new().change(User::change("b").set_email(new_email)))
        .await
        .unwrap();
    let without = User::find(&c, doc! { "email": { "$exists": false } })
        .await
        .unwrap();
    assert_eq!(without.len(), 2, "{without:?}");
}

/// A serializer that stores an amount as cents; it is never given `None`,
/// since serde leaves `None` out.
fn as_cents<S: serde::Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    let amount = v.expect("serde leaves None out");
    s.serialize_i64((amount * 100.0).round() as i64)
}

#[participant(collection = "refunds")]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Refund {
    #[serde(rename = "_id")]
    id: String,
    #[serde(serialize_with = "as_cents", skip_serializing_if = "Option::is_none")]
    amount: Option<f64>,
}

/// A field written through `serialize_with` and left out when `None` is read
/// as serde reads any `Option`: an absent field is `None`. So `unset_f()`
/// and `set_f(None)` remove it, as serde leaves it out, rather than pass
/// `None` to a serializer serde never gives it (which here would panic,
/// and elsewhere store what the struct does not read back as `None`).
#[test]
fn none_is_left_out_before_a_serializer_sees_it() {
    let unset = Refund::change("r").unset_amount();
    let by_hand = DocumentChange::update(Namespace::new("", "refunds"), "r").unset("amount");
    assert_eq!(DocumentChange::from(unset), by_hand);
    let set = Refund::change("r").set_amount(None);
    assert_eq!(DocumentChange::from(set), by_hand);
    let some = Refund::change("r").set_amount(Some(1.5));
    let by_hand = DocumentChange::update(Namespace::new("", "refunds"), "r").set("amount", 150_i64);
    assert_eq!(DocumentChange::from(some), by_hand);
}
