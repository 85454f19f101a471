//! Paths: walking a dotted path to the container of its last segment,
//! creating what is missing, and setting or removing the value there.

use bson::{Bson, Document};

use super::validate::type_mismatch;
use super::{MAX_PAD_INDEX, PATH_NOT_VIABLE};
use crate::query::{array_index, split_dot};
use crate::store::{StoreError, StoreErrorKind};

/// Where the last segment of a path lives.
pub(super) enum Parent<'a, 'p> {
    Doc(&'a mut Document),
    /// An array, and the name of the field holding it.
    Arr(&'a mut Vec<Bson>, &'p str),
}

/// Walks `path` down to the container of its last segment, returning it and
/// that segment. With `create`, missing intermediate fields become empty
/// sub-documents (and arrays are padded with nulls); without, a missing
/// intermediate yields `None`. A path through a scalar is an error when
/// creating, `None` otherwise.
pub(super) fn parent<'a, 'p>(
    doc: &'a mut Document,
    path: &'p str,
    create: bool,
) -> Result<Option<(Parent<'a, 'p>, &'p str)>, StoreError> {
    match split_dot(path) {
        None => Ok(Some((Parent::Doc(doc), path))),
        Some((seg, rest)) => {
            if !doc.contains_key(seg) {
                if !create {
                    return Ok(None);
                }
                doc.insert(seg, Document::new());
            }
            match doc.get_mut(seg) {
                Some(child) => parent_in(child, seg, rest, create),
                None => Ok(None),
            }
        }
    }
}

fn parent_in<'a, 'p>(
    value: &'a mut Bson,
    name: &'p str,
    path: &'p str,
    create: bool,
) -> Result<Option<(Parent<'a, 'p>, &'p str)>, StoreError> {
    match value {
        Bson::Document(d) => parent(d, path, create),
        Bson::Array(a) => {
            let Some((seg, rest)) = split_dot(path) else {
                return Ok(Some((Parent::Arr(a, name), path)));
            };
            let Some(i) = array_index(seg) else {
                return if create {
                    Err(cannot_create(seg, name, &Bson::Array(a.clone())))
                } else {
                    Ok(None)
                };
            };
            if i >= a.len() {
                if !create {
                    return Ok(None);
                }
                pad(a, i)?;
                a[i] = Bson::Document(Document::new());
            }
            parent_in(&mut a[i], seg, rest, create)
        }
        other => {
            if create {
                let seg = split_dot(path).map_or(path, |(seg, _)| seg);
                Err(cannot_create(seg, name, other))
            } else {
                Ok(None)
            }
        }
    }
}

fn cannot_create(field: &str, name: &str, element: &Bson) -> StoreError {
    type_mismatch(
        PATH_NOT_VIABLE,
        format!("Cannot create field '{field}' in element {{{name}: {element}}}"),
    )
}

/// Grows `a` with nulls so that index `i` exists.
fn pad(a: &mut Vec<Bson>, i: usize) -> Result<(), StoreError> {
    if i > MAX_PAD_INDEX {
        return Err(StoreError::new(
            StoreErrorKind::DocumentTooLarge,
            format!("array index {i} would make the document exceed the 16 MiB limit"),
        )
        .with_code(10334));
    }
    if i >= a.len() {
        a.resize(i + 1, Bson::Null);
    }
    Ok(())
}

pub(super) fn leaf_mut<'a>(parent: &'a mut Parent<'_, '_>, last: &str) -> Option<&'a mut Bson> {
    match parent {
        Parent::Doc(d) => d.get_mut(last),
        Parent::Arr(a, _) => a.get_mut(array_index(last)?),
    }
}

pub(super) fn put_leaf(parent: Parent<'_, '_>, last: &str, value: Bson) -> Result<(), StoreError> {
    match parent {
        Parent::Doc(d) => {
            // Replacing in place spares allocating the key again.
            match d.get_mut(last) {
                Some(slot) => *slot = value,
                None => {
                    d.insert(last, value);
                }
            }
            Ok(())
        }
        Parent::Arr(a, name) => match array_index(last) {
            Some(i) => {
                pad(a, i)?;
                a[i] = value;
                Ok(())
            }
            None => Err(cannot_create(last, name, &Bson::Array(a.clone()))),
        },
    }
}

pub(super) fn set_value(doc: &mut Document, path: &str, value: Bson) -> Result<(), StoreError> {
    if let Some((parent, last)) = parent(doc, path, true)? {
        put_leaf(parent, last, value)?;
    }
    Ok(())
}

pub(super) fn unset(doc: &mut Document, path: &str) {
    if let Ok(Some((parent, last))) = parent(doc, path, false) {
        match parent {
            Parent::Doc(d) => {
                d.remove(last);
            }
            Parent::Arr(a, _) => {
                // MongoDB leaves a null in place of an unset array element.
                if let Some(e) = array_index(last).and_then(|i| a.get_mut(i)) {
                    *e = Bson::Null;
                }
            }
        }
    }
}

/// The order in which MongoDB applies an update's paths, and so appends the
/// fields it creates: segment by segment, names compared as strings, or as
/// numbers when both are all digits (`"a.2"` before `"a.10"`), whatever the
/// operators and the order the update lists them in. (Paths that are equal
/// or prefixes of one another never meet here: the update is refused.)
pub(super) fn path_order(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (x, y) = (a.as_bytes(), b.as_bytes());
    // Up to the first difference the two paths share their segments.
    let i = x.iter().zip(y).take_while(|(p, q)| p == q).count();
    if i == x.len() || i == y.len() {
        // One is the other, or a prefix of it: the shorter comes first
        // (`a` before `a.b`, `a1` before `a12`, and `1` before `12` as numbers).
        return x.len().cmp(&y.len());
    }
    let (c, d) = (x[i], y[i]);
    if !(c.is_ascii_digit() && d.is_ascii_digit()) {
        // The differing segments are not both numbers (a segment that
        // ended is the shorter number if the other is one): as below,
        // without finding the segments.
        return match (c, d) {
            (b'.', _) => Ordering::Less,
            (_, b'.') => Ordering::Greater,
            (c, d) => c.cmp(&d),
        };
    }
    // The differing segment: from after the last dot of the shared prefix
    // to the next dot of each path.
    let start = x[..i].iter().rposition(|&c| c == b'.').map_or(0, |d| d + 1);
    let end = |s: &[u8]| {
        s[i..]
            .iter()
            .position(|&c| c == b'.')
            .map_or(s.len(), |e| i + e)
    };
    let (p, q) = (&x[start..end(x)], &y[start..end(y)]);
    let numeric = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    if numeric(p) && numeric(q) {
        return p.len().cmp(&q.len()).then_with(|| p.cmp(q));
    }
    // A segment that ended (at a dot, or at the end) is a prefix of the other.
    match (x[i], y[i]) {
        (b'.', _) => Ordering::Less,
        (_, b'.') => Ordering::Greater,
        (c, d) => c.cmp(&d),
    }
}

/// [`path_order`] as it is defined, segment by segment: the reference the
/// byte-wise version is tested against.
#[cfg(test)]
pub(super) fn path_order_by_segments(a: &str, b: &str) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    let (mut x, mut y) = (a.split('.'), b.split('.'));
    loop {
        let order = match (x.next(), y.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) if numeric(p) && numeric(q) => {
                p.len().cmp(&q.len()).then_with(|| p.cmp(q))
            }
            (Some(p), Some(q)) => p.cmp(q),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
}

/// Whether the paths of `update`'s operator documents, taken in the order
/// the update lists them, are already in [`path_order`].
pub(super) fn listed_in_path_order(update: &Document) -> bool {
    let mut last: Option<&str> = None;
    for spec in update.values() {
        let Bson::Document(spec) = spec else {
            continue;
        };
        for path in spec.keys() {
            if let Some(prev) = last {
                if path_order(prev, path) == std::cmp::Ordering::Greater {
                    return false;
                }
            }
            last = Some(path);
        }
    }
    true
}
