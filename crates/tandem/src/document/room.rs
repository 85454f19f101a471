//! Room in a document for what a transaction's later steps add.
//!
//! The apply is the last step the store may refuse. After it, a clear lands
//! the credits deferred to the commit (one that creates its field adds the
//! field), and an undo puts back the before-image (larger than what the
//! apply wrote, when the apply shrank a field). Refused as too large there,
//! a committed credit would never land and a canceled change would never be
//! undone. So every apply reserves, in the document's `_tandem.room`, the
//! most its clear or undo can add, and its filter requires the document,
//! with everything reserved there, what this apply adds and what it
//! reserves, to stay within the 16 MiB a document may hold. The clear or
//! undo takes its reservation off again, in the statement that adds what
//! it was for. Every apply, reserving or not, respects the reservations of
//! the others: while a document holds changes, `size + room <= 16 MiB`.
//!
//! Writes outside tandem to a held document are not bound by it (the
//! Checklist chapter says so).

use bson::{doc, Bson, Document};

use super::{image_from_doc, ROOM};
use crate::change::DocumentChange;
use crate::query::size::{document_len, value_len};

/// The most a document may hold, in bytes: MongoDB's limit.
pub(super) const MAX_DOCUMENT_LEN: i64 = 16 * 1024 * 1024;

/// What writing one field at `path` may add besides its value: the type
/// byte, the name and its terminator, an array index key when the field is
/// an element, for each parent that is missing an embedded document (its
/// own type byte, name, length and terminator), and for a numeric segment
/// past an array's end the nulls that pad the array up to it (each a type
/// byte, its index and a terminator).
fn field_overhead(path: &str) -> i64 {
    let mut overhead = len(path.len()).saturating_add(16);
    for seg in path.split('.') {
        overhead = overhead.saturating_add(8);
        if let Some(i) = crate::query::array_index(seg) {
            let each = 2 + len(crate::query::size::decimal_digits(i));
            overhead = overhead.saturating_add(len(i).saturating_mul(each));
        }
    }
    overhead
}

fn len(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The most an update document `update` can add to a document it applies
/// to: for every field it sets, increments or pushes, the field's
/// overhead and the value (a `$pull`, `$unset` or `$currentDate` adds
/// nothing beyond what is counted).
pub(super) fn update_growth(update: &Document) -> i64 {
    let mut growth = 0_i64;
    for (op, body) in update {
        let Bson::Document(body) = body else { continue };
        if matches!(op.as_str(), "$pull" | "$unset") {
            continue;
        }
        for (path, value) in body {
            let value = match op.as_str() {
                // An increment makes at most a 64-bit number (or a decimal).
                "$inc" => 16,
                "$currentDate" => 8,
                // `$each` lists several values.
                "$push" => match value {
                    Bson::Document(each) if each.contains_key("$each") => {
                        len(document_len(each)).saturating_mul(2)
                    }
                    v => len(value_len(v)),
                },
                _ => len(value_len(value)),
            };
            growth = growth
                .saturating_add(field_overhead(path))
                .saturating_add(value);
        }
    }
    growth
}

impl DocumentChange {
    /// The most this change's clear or undo (only one runs) can add to the
    /// document as its apply left it; zero for a change read back from a
    /// record an earlier version wrote, whose apply reserved nothing.
    ///
    /// The clear lands the deferred credits (each at most a new 64-bit
    /// field); the undo sets the before-image `before` back (each field at
    /// most its value). Both take the marker away and leave the rest of
    /// tandem's fields as they are, which adds nothing.
    pub(super) fn later_growth(&self, before: Option<&Document>) -> i64 {
        if !self.reserves_room {
            return 0;
        }
        let clear = self
            .deferred_credits()
            .map(|(path, _)| field_overhead(path).saturating_add(16))
            .fold(0_i64, i64::saturating_add);
        let undo = before
            .map(image_from_doc)
            .unwrap_or_default()
            .iter()
            .map(|(path, value)| match value {
                Some(v) => field_overhead(path).saturating_add(len(value_len(v))),
                None => 0,
            })
            .fold(0_i64, i64::saturating_add);
        clear.max(undo)
    }

    /// The condition of an apply that adds at most `growth` and reserves
    /// `later`: the document, what it has reserved, and both, fit in
    /// [`MAX_DOCUMENT_LEN`].
    pub(super) fn room_condition(&self, growth: i64, later: i64) -> Document {
        let most = MAX_DOCUMENT_LEN
            .saturating_sub(growth)
            .saturating_sub(later);
        doc! { "$lte": [
            { "$add": [{ "$bsonSize": "$$ROOT" }, { "$ifNull": [format!("${ROOM}"), 0_i64] }] },
            most,
        ] }
    }

    /// Whether the document `current` has too little room for an apply that
    /// adds at most `growth` and reserves `later` (what
    /// [`room_condition`](Self::room_condition) refuses).
    pub(super) fn lacks_room(current: &Document, growth: i64, later: i64) -> bool {
        let reserved = match crate::query::lookup(current, ROOM) {
            Some(Bson::Int64(n)) => *n,
            Some(Bson::Int32(n)) => i64::from(*n),
            _ => 0,
        };
        len(document_len(current))
            .saturating_add(reserved)
            .saturating_add(growth)
            .saturating_add(later)
            > MAX_DOCUMENT_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_grows_a_document_by_at_most_its_growth() {
        let mut current = doc! { "_id": "x", "a": { "b": 1_i32 } };
        let update = doc! {
            "$set": { "a.c.d": "long text here", "e": [1, 2, 3] },
            "$inc": { "a.b": 1_i64, "f.g": 5_i32 },
            "$push": { "h": { "k": "v" } },
        };
        let before = len(document_len(&current));
        crate::query::update::apply_update(&mut current, &update, bson::DateTime::now(), false)
            .unwrap();
        let after = len(document_len(&current));
        assert!(
            after - before <= update_growth(&update),
            "{before} -> {after}"
        );
        assert!(after > before);
    }

    /// A `set` past an array's end pads the array with nulls, counted too.
    #[test]
    fn padding_an_array_is_counted() {
        let mut current = doc! { "_id": "x", "tags": ["a"] };
        let update = doc! { "$set": { "tags.5000": "z" } };
        let before = len(document_len(&current));
        crate::query::update::apply_update(&mut current, &update, bson::DateTime::now(), false)
            .unwrap();
        let after = len(document_len(&current));
        assert!(after - before > 20_000, "{before} -> {after}");
        assert!(
            after - before <= update_growth(&update),
            "{before} -> {after}"
        );
    }
}
