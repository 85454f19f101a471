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
use crate::change::{DocumentChange, DocumentOp, FieldOp};
use crate::query::size::{document_len, value_len};

/// The most a document may hold, in bytes: MongoDB's limit.
pub(super) const MAX_DOCUMENT_LEN: i64 = 16 * 1024 * 1024;

/// What writing one field at `path` may add besides its value: the type
/// byte, the name and its terminator, an array index key when the field is
/// an element, and for each parent that is missing an embedded document
/// (its own type byte, name, length and terminator). Not the nulls that pad
/// an array written past its end: an exclusive change's size is worked out
/// from its before-image (`image_sizes`), and a shared increment may not
/// pad ([`DocumentChange::no_padding`]).
fn field_overhead(path: &str) -> i64 {
    let segments = len(path.bytes().filter(|&b| b == b'.').count() + 1);
    len(path.len())
        .saturating_add(segments.saturating_mul(7))
        .saturating_add(4)
}

fn len(v: usize) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The most an update document `update` can add to a document it applies
/// to, arrays it indexes past their end aside: for every field it sets,
/// increments or pushes, the field's overhead and the value (a `$pull`,
/// `$unset` or `$currentDate` adds nothing beyond what is counted).
pub(super) fn update_growth(update: &Document) -> i64 {
    let mut growth = 0_i64;
    for (op, body) in update {
        let Bson::Document(body) = body else { continue };
        if matches!(op.as_str(), "$pull" | "$unset") {
            continue;
        }
        for (path, value) in body {
            let value = match op.as_str() {
                // An increment makes at most a 64-bit number, or a decimal.
                "$inc" => match value {
                    Bson::Decimal128(_) => 16,
                    _ => 8,
                },
                "$currentDate" => 8,
                // `$each` lists several values; an element's key has at
                // most ten digits.
                "$push" => match value {
                    Bson::Document(each) if each.contains_key("$each") => {
                        len(document_len(each)).saturating_mul(2)
                    }
                    v => len(value_len(v)).saturating_add(12),
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

/// Whether a document has room for an apply
/// ([`DocumentChange::room_for`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Room {
    /// It fits, with what the others reserved.
    Fits,
    /// It fits, but not with what the changes pending there reserved for
    /// their clears and undos: a conflict, over once they finish.
    Reserved,
    /// It does not fit, whatever the others do.
    TooLarge,
}

/// How many numbers `v` holds, itself included.
fn numbers(v: &Bson) -> i64 {
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 1,
        Bson::Array(a) => a.iter().map(numbers).fold(0, i64::saturating_add),
        Bson::Document(d) => d.values().map(numbers).fold(0, i64::saturating_add),
        _ => 0,
    }
}

/// The conditions under which an increment of `path` pads no array (see
/// [`DocumentChange::no_padding`]).
fn no_padding_of(path: &str) -> Vec<Document> {
    let mut conds = Vec::new();
    if !crate::query::has_index_segment(path) {
        return conds;
    }
    let mut start = 0;
    for (k, seg) in path.split('.').enumerate() {
        let at = start;
        start += seg.len() + 1;
        let Some(i) = crate::query::array_index(seg).filter(|&i| k > 0 && i > 0) else {
            continue;
        };
        let parent = super::statements::field_expr(&path[..at - 1]);
        conds.push(match i32::try_from(i - 1) {
            Ok(before) => doc! { "$cond": [
                { "$isArray": parent.clone() },
                { "$gte": [{ "$arrayElemAt": [parent, before] }, Bson::Null] },
                true,
            ] },
            // Past any array a document can hold: only a field.
            Err(_) => doc! { "$cond": [{ "$isArray": parent }, false, true] },
        });
    }
    conds
}

impl DocumentChange {
    /// For a change that holds its document alone: the size of the fields
    /// it changes as the before-image `before` has them, and as its apply
    /// leaves them, worked out by applying the change to the image. The
    /// apply's filter pins the image, so the apply adds at most the
    /// difference one way and the undo the other (a padded array, a field
    /// shrunk and restored: exactly). `None` for a shared change (nothing
    /// imaged), or when the change cannot be applied to the image (the
    /// store refuses it too).
    fn image_sizes(&self, before: Option<&Document>) -> Option<(i64, i64, i64)> {
        let DocumentOp::Update { ops } = &self.op else {
            return None;
        };
        if !self.is_exclusive() {
            return None;
        }
        let mut set = Document::new();
        let mut slack = 0_i64;
        for (path, value) in before.map(image_from_doc).unwrap_or_default() {
            if let Some(v) = value {
                // Pinned by value only: an equal value of other numeric
                // types may stand there (an `Int32` for a `Decimal128`,
                // twelve bytes apart at most), the rest as in the image.
                if !super::statements::pins_bytes(&path, &v) {
                    slack = slack.saturating_add(numbers(&v).saturating_mul(12));
                }
                set.insert(path, v);
            }
        }
        let now = bson::DateTime::from_millis(0);
        let mut image = Document::new();
        if !set.is_empty() {
            crate::query::update::apply_update(&mut image, &doc! { "$set": set }, now, false)
                .ok()?;
        }
        let user = super::native::ops_update(ops);
        let mut applied = image.clone();
        if !user.is_empty() {
            crate::query::update::apply_update(&mut applied, &user, now, false).ok()?;
        }
        Some((
            len(document_len(&image)),
            len(document_len(&applied)),
            slack,
        ))
    }

    /// What the apply `update` adds to the document at most: tandem's own
    /// fields and a shared change's increments by [`update_growth`], and
    /// the fields an exclusive change writes by how much larger they are
    /// than their before-image `before`, worked out (`image_sizes`):
    /// negative where the apply shrinks them, so that the apply's filter,
    /// which adds what the undo reserves, asks for the room the document
    /// has now and no more.
    pub(super) fn apply_growth(&self, update: &Document, before: Option<&Document>) -> i64 {
        let (Some((image, applied, slack)), DocumentOp::Update { ops }) =
            (self.image_sizes(before), &self.op)
        else {
            return update_growth(update);
        };
        // The update without the change's own fields: what tandem adds.
        let mut own = update.clone();
        for (_, body) in own.iter_mut() {
            if let Bson::Document(body) = body {
                for op in ops {
                    body.remove(op.path());
                }
            }
        }
        update_growth(&own)
            .saturating_add(applied - image)
            .saturating_add(slack)
    }

    /// The most this change's clear or undo (only one runs) can add to the
    /// document as its apply left it; zero for a change read back from a
    /// record an earlier version wrote, whose apply reserved nothing.
    ///
    /// A shared change's clear lands its deferred credits (each at most a
    /// new 64-bit field: an increment never pads an array, see
    /// [`no_padding`](Self::no_padding)), and its undo only adds debits
    /// back. An exclusive change's undo restores the before-image, as
    /// much as the apply took away (`image_sizes`); its clear adds
    /// nothing. Both take the marker away and leave the rest of tandem's
    /// fields as they are, which adds nothing.
    ///
    /// The clear or undo works the reservation out again, from the spec and
    /// the before-image the record keeps, to take it off: this computation
    /// is part of the record's format. Change it only under a new flag in
    /// the spec, as `reservesRoom` marks this one, keeping this one for
    /// the records that carry it.
    pub(super) fn later_growth(&self, before: Option<&Document>) -> i64 {
        if !self.reserves_room {
            return 0;
        }
        if let Some((image, applied, slack)) = self.image_sizes(before) {
            return (image - applied).max(0).saturating_add(slack);
        }
        if self.is_exclusive() {
            // Not worked out: every field of the image, whole.
            return before
                .map(image_from_doc)
                .unwrap_or_default()
                .iter()
                .map(|(path, value)| match value {
                    Some(v) => field_overhead(path).saturating_add(len(value_len(v))),
                    None => 0,
                })
                .fold(0_i64, i64::saturating_add);
        }
        // A debit's undo adds its amount back, which can take a 32-bit
        // field past its range once credits landed meanwhile: the store
        // then makes it 64-bit, four bytes more.
        let undo = self.increments_where(|op| self.applies_early(op)).count();
        let clear = self
            .deferred_credits()
            .map(|(path, _)| field_overhead(path).saturating_add(16))
            .fold(0_i64, i64::saturating_add);
        clear.max(len(undo).saturating_mul(8))
    }

    /// The conditions under which no increment of a shared change pads an
    /// array (an exclusive change's padding is worked out from its image):
    /// where its path has a numeric segment `i > 0` past the first
    /// (`items.3.qty`, `byUser.1234`), the value before that segment is no
    /// array, or an array with an element at `i - 1` (`$arrayElemAt` finds
    /// something there, `null` included). An `$inc` past an array's end
    /// pads it with nulls, as many as the index says, which no bound on
    /// the apply's growth could cover.
    pub(super) fn no_padding(&self) -> Vec<Document> {
        self.padded_increments().flat_map(no_padding_of).collect()
    }

    /// The path of an increment of this shared change that would pad an
    /// array of `current` ([`no_padding`](Self::no_padding) refuses it).
    pub(super) fn pads_an_array(&self, current: &Document) -> Option<String> {
        self.padded_increments()
            .find(|path| {
                let conds = no_padding_of(path);
                !conds.is_empty()
                    && !crate::query::matches(current, &doc! { "$expr": { "$and": conds } })
                        .unwrap_or(true)
            })
            .map(str::to_owned)
    }

    /// The paths of the increments of a shared change.
    fn padded_increments(&self) -> impl Iterator<Item = &str> {
        let ops: &[FieldOp] = match &self.op {
            DocumentOp::Update { ops } if !self.is_exclusive() => ops,
            _ => &[],
        };
        ops.iter().filter_map(|op| match op {
            FieldOp::Inc { path, .. } => Some(path.as_str()),
            _ => None,
        })
    }

    /// The condition of an apply that adds at most `growth` and reserves
    /// `later`: the document, what it has reserved, and both, fit in
    /// [`MAX_DOCUMENT_LEN`].
    pub(super) fn room_condition(&self, growth: i64, later: i64) -> Document {
        let most = MAX_DOCUMENT_LEN
            .saturating_sub(growth)
            .saturating_sub(later);
        doc! { "$lte": [
            { "$add": [{ "$bsonSize": "$$ROOT" }, { "$ifNull": [(["$", ROOM].concat()), 0_i64] }] },
            most,
        ] }
    }

    /// Whether the document `current` has too little room for an apply that
    /// adds at most `growth` and reserves `later` (what
    /// [`room_condition`](Self::room_condition) refuses).
    pub(super) fn room_for(current: &Document, growth: i64, later: i64) -> Room {
        let reserved = match crate::query::lookup(current, ROOM) {
            Some(Bson::Int64(n)) => *n,
            Some(Bson::Int32(n)) => i64::from(*n),
            _ => 0,
        };
        let alone = len(document_len(current))
            .saturating_add(growth)
            .saturating_add(later);
        if alone > MAX_DOCUMENT_LEN {
            Room::TooLarge
        } else if alone.saturating_add(reserved) > MAX_DOCUMENT_LEN {
            Room::Reserved
        } else {
            Room::Fits
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each update, on documents that lack its fields' parents, hold
    /// them, or hold an array it appends to, grows it by at most
    /// [`update_growth`].
    #[test]
    fn every_update_grows_by_at_most_its_bound() {
        let starts = [
            doc! { "_id": "x" },
            doc! { "_id": "x", "a": { "b": 1_i32 }, "m": [1, 2, 3], "_tandem": { "pending": 0 } },
            doc! { "_id": "x", "a": { "b": i32::MAX }, "m": (0..150).collect::<Vec<i32>>() },
        ];
        let updates = [
            doc! { "$set": { "a.c.d.e": "text", "m2": { "k": [1, 2] } } },
            doc! { "$inc": { "a.b": 1_i64, "z.y.x": 5_i32, "_tandem.pending": 1 } },
            doc! { "$inc": { "a.b": 1_i32 } },
            doc! { "$push": { "m": "tx-0123456789abcdef", "n": 1 } },
            doc! {
                "$set": { "_tandem.lock": "tx-0123456789abcdef", "_tandem.room": 47_i64 },
                "$inc": { "_tandem.pending": 1, "_tandem.credit.balance": 10_i64 },
                "$push": { "pendingTransactions": "tx-0123456789abcdef" },
            },
            doc! { "$currentDate": { "t.u": true } },
        ];
        for start in &starts {
            for update in &updates {
                let mut d = start.clone();
                let before = len(document_len(&d));
                if crate::query::update::apply_update(&mut d, update, bson::DateTime::now(), false)
                    .is_err()
                {
                    continue;
                }
                let after = len(document_len(&d));
                assert!(
                    after - before <= update_growth(update),
                    "{start} with {update}: {before} -> {after}, bound {}",
                    update_growth(update)
                );
            }
        }
    }

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
}
