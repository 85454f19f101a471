//! How deep a stored document may nest, as MongoDB counts it.
//!
//! MongoDB refuses to store a document whose documents and arrays nest
//! deeper than 180 levels, the document itself included (code 15): the
//! server's `maxBSONDepth` (200 by default) less 20 levels it keeps for
//! the documents it wraps around users' (oplog entries). An empty document
//! or array does not count. An update is checked where it writes: the
//! levels of its path, and those of the value it writes there.

use bson::{Bson, Document};

use super::size::document_len_within;
use crate::store::{StoreError, StoreErrorKind};

/// The most levels of non-empty documents and arrays a stored document may
/// nest, itself included.
pub(crate) const MAX_STORED_DEPTH: usize = 180;

/// Whether `value` nests no more than `levels` levels of non-empty
/// documents and arrays. (Recursive, but never deeper than `levels`.)
fn fits(value: &Bson, levels: usize) -> bool {
    match value {
        Bson::Document(d) if !d.is_empty() => levels > 0 && d.values().all(|v| fits(v, levels - 1)),
        Bson::Array(a) if !a.is_empty() => levels > 0 && a.iter().all(|v| fits(v, levels - 1)),
        _ => true,
    }
}

/// `doc` and its length as BSON, unless it nests too deep to be stored
/// whole (an insert, a replacement, an upsert's new document): one walk
/// measures both. A refused document is taken apart level by level:
/// dropped whole, it would be dropped recursively, one call per level,
/// which a document nested deep enough turns into a stack overflow.
pub(crate) fn measured(doc: Document) -> Result<(Document, usize), StoreError> {
    if let Some(len) = document_len_within(&doc, MAX_STORED_DEPTH) {
        return Ok((doc, len));
    }
    let mut parts: Vec<Bson> = doc.into_iter().map(|(_, v)| v).collect();
    while let Some(part) = parts.pop() {
        match part {
            Bson::Document(d) => parts.extend(d.into_iter().map(|(_, v)| v)),
            Bson::Array(a) => parts.extend(a),
            _ => {}
        }
    }
    Err(StoreError::new(
        StoreErrorKind::Overflow,
        format!("cannot insert document because it exceeds {MAX_STORED_DEPTH} levels of nesting"),
    )
    .with_code(15))
}

/// The levels of the document and of the documents (or arrays) on the way
/// to `path`'s last segment: one per segment.
fn levels(path: &str) -> usize {
    path.bytes().filter(|b| *b == b'.').count() + 1
}

/// Whether `path`'s levels leave `value` room below them: a path of fewer
/// bytes than twice the limit has too few segments to matter, and a
/// scalar nests nothing (the common case, decided without counting).
fn fits_at(path: &str, value: &Bson, below: usize) -> bool {
    let scalar = !matches!(value, Bson::Document(_) | Bson::Array(_));
    if scalar && path.len() + 2 * below < 2 * MAX_STORED_DEPTH {
        return true;
    }
    MAX_STORED_DEPTH
        .checked_sub(levels(path) + below)
        .is_some_and(|room| fits(value, room))
}

/// The refusal of an update that would nest too deep.
fn too_deep(op: &str, path: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Overflow,
        format!(
            "the update's {op} of '{path}' would nest the document deeper than {MAX_STORED_DEPTH} levels"
        ),
    )
    .with_code(15)
}

/// Refuses a `$set`, `$setOnInsert` or `$max` of `value` at `path` that
/// would nest the document too deep.
pub(crate) fn check_set(op: &str, path: &str, value: &Bson) -> Result<(), StoreError> {
    if fits_at(path, value, 0) {
        return Ok(());
    }
    Err(too_deep(op, path))
}

/// Refuses a `$push` or `$addToSet` at `path` (`argument` being a value or
/// `{$each: [...]}`) that would nest the document too deep: the elements
/// go one level below the path, into the array.
pub(crate) fn check_push(op: &str, path: &str, argument: &Bson) -> Result<(), StoreError> {
    let each = match argument {
        Bson::Document(d) => match d.get("$each") {
            Some(Bson::Array(each)) => Some(each),
            _ => None,
        },
        _ => None,
    };
    let fits = match each {
        // Nothing pushed: at most an empty array, which does not count.
        Some(each) if each.is_empty() => fits_at(path, &Bson::Null, 0),
        Some(each) => each.iter().all(|v| fits_at(path, v, 1)),
        None => fits_at(path, argument, 1),
    };
    if fits {
        return Ok(());
    }
    Err(too_deep(op, path))
}

/// Refuses an `$inc` or `$currentDate` at a path of more levels than a
/// document may nest.
pub(crate) fn check_path(op: &str, path: &str) -> Result<(), StoreError> {
    check_set(op, path, &Bson::Null)
}
