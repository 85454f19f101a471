//! Typed documents and field paths: the runtime side of `#[participant]`.
//!
//! `#[participant]` makes an ordinary serde document struct a participant
//! document, so that a change of several documents is declared rather than
//! written field path by field path:
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use tandem::{participant, DocumentChange, GuardOp, Namespace};
//!
//! #[participant(collection = "accounts")]
//! #[derive(Serialize, Deserialize)]
//! struct Account {
//!     #[serde(rename = "_id")]
//!     id: String,
//!     balance: i64,
//! }
//!
//! let debit = Account::change("A").inc_balance(-100).require_balance_gte(100);
//!
//! // The same change, built by hand:
//! let by_hand = DocumentChange::update(Namespace::new("", "accounts"), "A")
//!     .inc("balance", -100_i64)
//!     .require("balance", GuardOp::Gte, 100_i64);
//! assert_eq!(DocumentChange::from(debit), by_hand);
//! ```
//!
//! Add the typed change to a transaction as it is: `Transaction::change`
//! takes anything that converts into a [`DocumentChange`].
//!
//! # What is generated
//!
//! For a struct `Account`, in the same module and with the struct's visibility:
//!
//! * `impl` [`ParticipantDocument`] `for Account`: the collection, the
//!   database, the marker field, and the constructors below;
//! * `AccountChange`, the typed builder: it wraps a [`DocumentChange`],
//!   converts into one with `From`/`Into`, and is `AsRef<DocumentChange>`;
//! * `AccountFields`, the typed paths of the fields (see [Typed paths](#typed-paths));
//! * the associated functions `Account::change(id)` (an update of the
//!   document `id`), `Account::delete(id)`, `account.insert()` and
//!   `Account::fields()`. `id` has the type of the id field (`impl Into<Id>`,
//!   or exactly the id type for numbers); for an `Option<T>` id field it is `T`;
//! * typed access through a [`Coordinator`](crate::Coordinator) (its default
//!   store, and its database when the type names none), outside any
//!   transaction:
//!
//!   | function | does |
//!   |---|---|
//!   | `Account::get(&coordinator, id)` | the document, as an `Account`; `None` if missing or only an insert's placeholder |
//!   | `Account::find(&coordinator, filter)` | every document matching a MongoDB filter, by `_id`, placeholders left out |
//!   | `Account::in_flight(&coordinator, id)` | whether a transaction is in flight on it (marker, lock, pending count, placeholder) |
//!   | `Account::insert_now(&coordinator, &account)` | a plain insert; `DuplicateKey` if the `_id` is taken |
//!   | `Account::put(&coordinator, &account)` | insert, or replace a settled document; [`InFlight`](crate::StoreErrorKind::InFlight) and no change otherwise |
//!
//!   `get` and `find` take a `Coordinator` or an `Arc<Coordinator>` (see
//!   [`ReadDocuments`](crate::ReadDocuments)). Reads see documents as stored:
//!   one with a transaction in flight may show its applied half.
//!
//! Every generated item has documentation naming the field and the path it is
//! stored at, so the documentation of your crate lists the builder's methods.
//!
//! # Builder methods
//!
//! For each field `f` (its Rust name; the stored path follows serde's naming):
//!
//! | method | for fields of type | stores |
//! |---|---|---|
//! | `set_f(value)` | every type | `$set` |
//! | `inc_f(by)` | `i32`, `i64`, `f64` | `$inc` (commutes with other increments) |
//! | `unset_f()` | `Option<T>` | `$set` of `None` as serde stores it (`null`) |
//! | `push_f(elem)`, `pull_f(elem)` | `Vec<T>` (taking a `T`) | `$push`, `$pull` |
//! | `require_f_eq(value)`, `require_f_ne(value)` | every type but `HashMap`, `HashSet` | guard `==`, `!=` |
//! | `require_f_gt/_gte/_lt/_lte(value)` | numbers, `String`, `DateTime` | guard `>`, `>=`, `<`, `<=` |
//! | `require_f_exists()`, `require_f_missing()` | `Option<T>` | guard: the field is `Some`, or `None` |
//!
//! Values of number fields are taken as the field's exact type, so that a
//! literal such as `5_000_000_000` gets the field's type; other values are
//! taken as `impl Into<T>` (`set_owner("bob")` for a `String`). Values are
//! converted with `bson::to_bson`, so any serde type works: an enum of unit
//! variants is stored as the variant's name. A value that cannot be converted
//! is reported by [`DocumentChange::validate`] as
//! [`ChangeError::Unserializable`](crate::ChangeError::Unserializable).
//!
//! A wrong value type does not compile: `inc_balance("x")` fails with
//! "expected `i64`, found `&str`" at the argument, a method for a field that
//! does not exist or does not allow it (`inc_owner` on a `String`,
//! `unset_balance` on an `i64`) is not found, and a [`Field`] of another
//! document type is refused.
//!
//! `in_store(name)` runs the change on a named store of the coordinator.
//!
//! # Typed paths
//!
//! `Account::fields()` returns `AccountFields`, whose method per field returns
//! its [`Field<Account, T>`](Field). The generic builder methods take such a
//! path and a value of its exact type: `set(field, value)`, `inc(field, by)`
//! (for [`Numeric`] fields), `unset(field)` (for `Option` fields; it
//! removes the field, where `unset_f()` stores `None` as serde does),
//! `push`/`pull(field, elem)` (for `Vec` fields), `require(field, op, value)`,
//! `require_eq/_ne/_gt/_gte/_lt/_lte(field, value)`, and
//! `require_exists/_missing(field)`. [`Field::index`] addresses an array
//! element, [`Field::new`] any path.
//!
//! # Presence guards follow the Rust type
//!
//! Serde stores `None` as `null` (unless the field is skipped when `None`),
//! and `null` is present for MongoDB's `$exists`. So the presence guards of
//! an `Option` field test what the struct would read: `require_f_exists()`
//! (and `require_exists(field)` with the field's typed path) passes when the
//! field holds a value, present and not `null` (`$ne: null`);
//! `require_f_missing()` passes when it reads as `None`, absent or `null`
//! (`$eq: null`). On a field of any other type, where a stored `null` cannot
//! be read anyway, they test presence (`$exists`), which lets an increment
//! under `require_exists` share its document with other increments. A
//! [`Field`] made with [`Field::new`] tests presence; [`Field::optional`]
//! makes one that tests for `null` too.
//!
//! A field marked `#[participant(nested)]`, whose type (or `Option` of it) is a
//! struct marked `#[participant(embedded)]`, returns the embedded struct's
//! paths, prefixed: fields of sub-documents are dotted paths that type-check.
//! The embedded paths are themselves a [`FieldPath`] naming the whole
//! sub-document.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use tandem::{participant, DocumentChange, Namespace};
//!
//! #[participant(embedded)]
//! #[derive(Serialize, Deserialize)]
//! #[serde(rename_all = "camelCase")]
//! struct Address {
//!     city: String,
//!     zip_code: Option<String>,
//! }
//!
//! #[participant(collection = "customers", db = "crm")]
//! #[derive(Serialize, Deserialize)]
//! struct Customer {
//!     #[serde(rename = "_id")]
//!     id: i64,
//!     #[participant(nested)]
//!     address: Address,
//!     visits: i32,
//! }
//!
//! let f = Customer::fields();
//! let moved = Customer::change(7)
//!     .set(f.address().city(), "Paris".to_owned())
//!     .unset(f.address().zip_code())
//!     .inc(f.visits(), 1);
//!
//! let by_hand = DocumentChange::update(Namespace::new("crm", "customers"), 7_i64)
//!     .set("address.city", "Paris")
//!     .unset("address.zipCode")
//!     .inc("visits", 1_i32);
//! assert_eq!(DocumentChange::from(moved), by_hand);
//! ```
//!
//! # Options
//!
//! On the struct, `#[participant(...)]` takes:
//!
//! * `collection = "..."`: the collection (required for documents);
//! * `db = "..."`: the database; without it, the coordinator's default database;
//! * `marker = "..."`: the marker array's name (default `pendingTransactions`);
//! * `crate = "..."`: the path of this crate, when it is not `::tandem`
//!   (for crates that re-export it);
//! * `embedded`: a struct stored inside documents, which only gets its typed
//!   paths (`AddressFields<D>`) and no collection.
//!
//! On a field:
//!
//! * `id`: the id field, when it is not found as the field stored as `_id`
//!   (it must still be stored as `_id`);
//! * `nested`: the field holds an `embedded` struct (see above);
//! * `skip`: no methods for this field.
//!
//! # Rules
//!
//! * The struct derives `Serialize` and `Deserialize`, below `#[participant]`
//!   (an attribute macro cannot see the attributes above it), and has named
//!   fields and no generic parameters.
//! * One field is stored as `_id`. It gets no builder methods: a change never
//!   changes the id.
//! * Stored names follow `#[serde(rename)]` and `#[serde(rename_all)]` (every
//!   serde casing; the serialization side when the two differ).
//! * `serde(...)` and `participant(...)` attributes are written directly, not
//!   inside `#[cfg_attr(...)]`, which the attribute sees unexpanded on fields:
//!   such an attribute is a compile error rather than a rename it would miss.
//! * Documents carry tandem's own fields: the marker array and `_tandem`. The
//!   struct need not declare them, since serde ignores unknown fields; so
//!   `#[serde(deny_unknown_fields)]` is refused. A field stored under the marker
//!   name must be a `Vec` with `#[serde(default)]` (it is left out of inserted
//!   documents); a field stored as `_tandem` is refused.
//! * Fields skipped by serde (`skip`, `skip_serializing`, `skip_deserializing`)
//!   and `flatten`ed fields get no methods. Fields serialized `with` or
//!   `serialize_with` a function get `set_`, `require_eq`/`_ne` and (for
//!   `Option`) `unset_` methods whose values go through that function, and
//!   no typed path; so do fields read `deserialize_with` a function.
//! * The names `XChange` and `XFields`, and the associated functions `change`,
//!   `delete`, `insert` and `fields` of the struct, must be free.
//!
//! Mistakes in the input are all reported at once, each at its place, and the
//! generated items are still declared so that code using them adds no errors.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;

use crate::change::DocumentChange;
use crate::store::Namespace;

/// A document type that transactions change: implemented by `#[participant]`.
///
/// It tells where the documents live and which marker field they carry, and
/// builds the typed changes of the generated `…Change` builder.
pub trait ParticipantDocument: Sized {
    /// The type of the id field (the one stored as `_id`).
    type Id;

    /// The generated typed change builder, e.g. `AccountChange`.
    type Change: Into<DocumentChange>;

    /// The generated typed field paths, e.g. `AccountFields`.
    type Fields;

    /// The collection the documents live in.
    const COLLECTION: &'static str;

    /// The database, or `None` for the coordinator's default database.
    const DB: Option<&'static str>;

    /// The name of the marker array on the documents (default `pendingTransactions`).
    const MARKER: &'static str;

    /// Database and collection; an empty database name stands for the coordinator's default.
    fn namespace() -> Namespace {
        Namespace::new(Self::DB.unwrap_or(""), Self::COLLECTION)
    }

    /// The typed field paths of the document.
    fn fields() -> Self::Fields;

    /// A change of fields of the existing document `id`.
    fn update(id: Self::Id) -> Self::Change;

    /// The deletion of the document `id`, carried out when the transaction commits.
    fn delete(id: Self::Id) -> Self::Change;

    /// The insertion of this document; its id field is the document id.
    fn insert(&self) -> Self::Change;
}

/// A struct stored inside participant documents: implemented by `#[participant(embedded)]`.
///
/// A field marked `#[participant(nested)]` whose type is embedded returns the
/// embedded type's field paths, prefixed with the field's own path.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an embedded document type",
    label = "`#[participant(nested)]` needs a type marked `#[participant(embedded)]`",
    note = "add `#[participant(embedded)]` above the derives of `{Self}`"
)]
pub trait Embedded {
    /// The generated field paths, for fields of the document type `D`.
    type Fields<D>;

    /// The field paths of an embedded document stored at `path`; `nullable`
    /// for an `Option` of it (see [`FieldPath::nullable`]), below the
    /// `Option` embedded documents `optional_parents` (see
    /// [`FieldPath::optional_parents`]).
    #[doc(hidden)]
    fn fields_at<D>(path: String, nullable: bool, optional_parents: Vec<String>)
        -> Self::Fields<D>;
}

/// A number that `$inc` can add: `i32`, `i64` or `f64`.
///
/// Implement it for a type of your own that serializes to one of them (for
/// example a `#[serde(transparent)]` newtype around `i64`) to increment it
/// with the generic `inc` method of a generated builder.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be incremented",
    label = "only `i32`, `i64` and `f64` fields (or types implementing `tandem::Numeric`) can be incremented"
)]
pub trait Numeric: serde::Serialize {}

impl Numeric for i32 {}
impl Numeric for i64 {}
impl Numeric for f64 {}

/// Something that names a field of the document type `D` holding a `Value`.
///
/// Implemented by [`Field`] and by the field paths of embedded documents
/// (which name the whole embedded document).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a field path of `{D}`",
    label = "expected a field of `{D}`, such as one returned by its `fields()`"
)]
pub trait FieldPath<D> {
    /// The type of the field.
    type Value;

    /// The dotted path of the field in the stored document.
    fn path(&self) -> &str;

    /// Whether a stored `null` reads as "no value" (`None` of an `Option`
    /// field), so that presence guards test for `null` as well as absence.
    ///
    /// `false` unless the path was made for an `Option` field.
    fn nullable(&self) -> bool {
        false
    }

    /// The paths of the `Option` embedded documents this path lies below,
    /// outermost first (`address` for `f.address().city()` of
    /// `address: Option<Address>`).
    ///
    /// Where one is absent, a `set`, `inc` or `push` through the path would
    /// create a sub-document holding that one field, which the embedded
    /// struct could not read back. So the generic builder methods guard such
    /// a change on each of them existing: on a document without one, the
    /// transaction is refused as by a failed guard, and nothing is written.
    /// (A stored `null` is refused by the store, with
    /// [`StepError::TypeMismatch`](crate::StepError::TypeMismatch).)
    ///
    /// Empty unless the path was made below an `Option` field by
    /// `#[participant(nested)]`.
    fn optional_parents(&self) -> &[String] {
        &[]
    }
}

/// The typed path of a field holding a `T` inside documents of type `D`.
///
/// Get one from the generated `fields()` of a document type, e.g.
/// `Account::fields().balance()`, and pass it to the generic methods of the
/// generated builder (`set`, `inc`, `require`, ...), which check the value
/// type against `T`.
pub struct Field<D, T> {
    path: String,
    nullable: bool,
    optional_parents: Vec<String>,
    types: PhantomData<fn() -> (D, T)>,
}

impl<D, T> Field<D, T> {
    /// A field at any dotted `path`, typed by the caller.
    ///
    /// The generated `fields()` are the checked way to get fields; use this
    /// for paths they cannot express, such as keys of a map.
    ///
    /// Its presence guards test presence (`$exists`); for a path holding an
    /// `Option`, where a stored `null` reads as `None`, use
    /// [`Field::optional`].
    pub fn new(path: impl Into<String>) -> Self {
        Field {
            path: path.into(),
            nullable: false,
            optional_parents: Vec::new(),
            types: PhantomData,
        }
    }

    /// The dotted path of the field in the stored document.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The dotted path, as an owned string.
    pub fn into_path(self) -> String {
        self.path
    }
}

impl<D, T> Field<D, Option<T>> {
    /// An `Option` field at any dotted `path`: its presence guards treat a
    /// stored `null` (serde's `None`) as no value, as the generated paths of
    /// `Option` fields do.
    pub fn optional(path: impl Into<String>) -> Self {
        Field {
            path: path.into(),
            nullable: true,
            optional_parents: Vec::new(),
            types: PhantomData,
        }
    }
}

impl<D, T> Field<D, Vec<T>> {
    /// The element at `index` of an array field (path `field.index`).
    ///
    /// Its presence guards test presence; for an element of type `Option`,
    /// build it with [`Field::optional`].
    pub fn index(&self, index: usize) -> Field<D, T> {
        Field {
            optional_parents: self.optional_parents.clone(),
            ..Field::new(format!("{}.{index}", self.path))
        }
    }
}

impl<D, T> FieldPath<D> for Field<D, T> {
    type Value = T;

    fn path(&self) -> &str {
        &self.path
    }

    fn nullable(&self) -> bool {
        self.nullable
    }

    fn optional_parents(&self) -> &[String] {
        &self.optional_parents
    }
}

impl<D, T> Clone for Field<D, T> {
    fn clone(&self) -> Self {
        Field {
            path: self.path.clone(),
            nullable: self.nullable,
            optional_parents: self.optional_parents.clone(),
            types: PhantomData,
        }
    }
}

impl<D, T> fmt::Debug for Field<D, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut t = f.debug_tuple("Field");
        t.field(&self.path);
        if self.nullable {
            t.field(&"optional");
        }
        t.finish()
    }
}

impl<D, T> fmt::Display for Field<D, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)
    }
}

impl<D, T> PartialEq for Field<D, T> {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
            && self.nullable == other.nullable
            && self.optional_parents == other.optional_parents
    }
}

impl<D, T> Eq for Field<D, T> {}

impl<D, T> Hash for Field<D, T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.path.hash(state);
        self.nullable.hash(state);
        self.optional_parents.hash(state);
    }
}

/// Support for the code `#[participant]` generates. Not a public API.
#[doc(hidden)]
pub mod __private {
    use bson::Bson;
    use serde::Serialize;

    pub use super::{Embedded, Field, FieldPath, Numeric, ParticipantDocument};
    pub use crate::change::{DocumentChange, DocumentOp, GuardOp};
    pub use crate::error::ChangeError;
    pub use crate::store::Namespace;
    pub use std::marker::PhantomData;

    fn with_id<D: ParticipantDocument, I: Serialize + ?Sized>(
        id: &I,
        make: fn(crate::store::Namespace, Bson) -> DocumentChange,
    ) -> DocumentChange {
        let mut change = match bson::to_bson(id) {
            Ok(id) => make(D::namespace(), id).marker(D::MARKER),
            Err(e) => {
                let mut change = make(D::namespace(), Bson::Null).marker(D::MARKER);
                change.push_error(ChangeError::Unserializable {
                    path: "_id".into(),
                    message: e.to_string(),
                });
                change
            }
        };
        change.origin = crate::change::Origin(Some(std::any::type_name::<D>()));
        change
    }

    /// The update of document `id` of `D`.
    pub fn update<D: ParticipantDocument, I: Serialize + ?Sized>(id: &I) -> DocumentChange {
        with_id::<D, I>(id, DocumentChange::update)
    }

    /// The deletion of document `id` of `D`.
    pub fn delete<D: ParticipantDocument, I: Serialize + ?Sized>(id: &I) -> DocumentChange {
        with_id::<D, I>(id, DocumentChange::delete)
    }

    /// The insertion of `doc`, without the marker field it may declare.
    pub fn insert<D: ParticipantDocument + Serialize>(doc: &D) -> DocumentChange {
        let mut change = DocumentChange::insert_serialized(D::namespace(), doc).marker(D::MARKER);
        if let DocumentOp::Insert { doc } = &mut change.op {
            doc.remove(D::MARKER);
        }
        change.origin = crate::change::Origin(Some(std::any::type_name::<D>()));
        change
    }

    /// The path of a field of an embedded document stored at `path` (an
    /// `Option` of one if `nullable`), itself below `optional_parents`.
    pub fn field_below<D, T>(
        path: String,
        nullable: bool,
        optional_parents: Vec<String>,
    ) -> Field<D, T> {
        Field {
            path,
            nullable,
            optional_parents,
            types: PhantomData,
        }
    }

    /// The optional parents of the fields of an embedded document stored at
    /// `path`, below `optional_parents`: those, and `path` itself if it is
    /// an `Option` (`nullable`).
    pub fn parents_below(optional_parents: &[String], path: &str, nullable: bool) -> Vec<String> {
        let mut parents = optional_parents.to_vec();
        if nullable {
            parents.push(path.to_owned());
        }
        parents
    }

    /// `change` guarded on every optional parent of `field` existing (see
    /// [`FieldPath::optional_parents`]), each guard once.
    pub fn parents_held<D, F: FieldPath<D>>(
        mut change: DocumentChange,
        field: &F,
    ) -> DocumentChange {
        for parent in field.optional_parents() {
            let held = change
                .guards
                .iter()
                .any(|g| g.path == *parent && g.op == GuardOp::Exists);
            if !held {
                change = change.require(parent.clone(), GuardOp::Exists, Bson::Null);
            }
        }
        change
    }

    /// `prefix.name`, or `name` at the root.
    pub fn join(prefix: &str, name: &str) -> String {
        if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}.{name}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Doc;

    #[test]
    fn fields_compare_and_index_by_path() {
        let tags: Field<Doc, Vec<String>> = Field::new("tags");
        assert_eq!(tags.index(2).path(), "tags.2");
        assert_eq!(tags.clone(), tags);
        assert_eq!(tags.to_string(), "tags");
        assert_eq!(format!("{tags:?}"), "Field(\"tags\")");
        assert_eq!(FieldPath::path(&tags), "tags");
        assert_eq!(tags.into_path(), "tags");
        assert_eq!(__private::join("", "a"), "a");
        assert_eq!(__private::join("a.b", "c"), "a.b.c");
    }
}
