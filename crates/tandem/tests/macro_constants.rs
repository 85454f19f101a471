//! The constants of tandem that `#[participant]` must know are copied into the
//! macro crate (a proc-macro crate cannot depend on the crate its expansion
//! uses). The copies live in one file of plain `const` items,
//! `tandem-macros/src/consts.rs`, which this test compiles in and compares
//! with tandem's own: changing either side without the other fails here.

use serde::{Deserialize, Serialize};
use tandem::{participant, ParticipantDocument};

/// The macro crate's copies, compiled from its source.
mod copies {
    include!("../../tandem-macros/src/consts.rs");
}

#[test]
fn the_macro_crate_copies_are_tandems_constants() {
    assert_eq!(copies::DEFAULT_MARKER, tandem::change::DEFAULT_MARKER);
    assert_eq!(copies::META_FIELD, tandem::change::META_FIELD);
}

#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    id: String,
}

/// The copy of the default marker is the one generated code uses.
#[test]
fn a_document_without_a_marker_option_uses_tandems_default_marker() {
    assert_eq!(Account::MARKER, tandem::change::DEFAULT_MARKER);
}
