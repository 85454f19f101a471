//! The undo log: what it takes to restore a document an update is applied
//! to in place, and what the update changed.

use bson::{Bson, Document};

use super::path::{parent, Parent};
use crate::query::{array_index, lookup, size, split_dot};

/// What an operator may do to the value at its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    /// Replace or create it (`$set`, `$inc`, `$max`, `$currentDate`, `$setOnInsert`).
    Write,
    /// Remove it (`$unset`).
    Unset,
    /// Append to the array there, or create it (`$push`, `$addToSet`).
    Append,
    /// Remove elements from the array there (`$pull`).
    Pull,
    /// Append `pushed` elements to the array there and keep its last
    /// `keep` (`$push` with `$each` and a negative `$slice`); where that
    /// does not apply (no array there, or fewer kept than pushed), as
    /// [`Write`](Self::Write).
    SlicedAppend { pushed: usize, keep: usize },
}

/// How to undo the operators of an update, one entry per operator path, and
/// what they changed: whether anything, and by how much the document's BSON
/// size changed. Each entry records only what its operator touches: the
/// previous value of the field it replaces, the length of the array it
/// appends to, the elements it pulls; never a whole array it merely grows.
#[derive(Debug, Default)]
pub(crate) struct UndoLog<'u> {
    entries: Vec<Entry<'u>>,
    /// Whether an operator changed a value (as `Bson`'s `==` tells).
    changed: bool,
    /// The change in the document's BSON size so far.
    size_delta: isize,
}

#[derive(Debug)]
struct Entry<'u> {
    /// The operator's path.
    path: &'u str,
    undo: Undo<'u>,
}

#[derive(Debug)]
enum Undo<'u> {
    /// The operator could not change anything (or failed before changing anything).
    Nothing,
    /// The value at `at` (the operator's path, or the prefix of it that the
    /// operator creates) before the operator replaced, created or removed it.
    Value {
        at: &'u str,
        /// The previous value; `None` if there was none.
        old: Option<Bson>,
        /// The field's previous position in its document, kept when the
        /// operator removes it.
        index: Option<usize>,
    },
    /// The array at `at` had `len` elements; the operator may append to it.
    Appended { at: &'u str, len: usize },
    /// The array at `at` had `len` elements; the operator appends `pushed`
    /// and then drops the first `dropped.len()`, kept here: a bounded log
    /// (a record's history) is saved by what leaves it, not whole.
    SlicedAppend {
        at: &'u str,
        len: usize,
        pushed: usize,
        dropped: Vec<Bson>,
    },
    /// The array at `at` had `len` elements, of which the operator removed
    /// `removed` (with their previous indexes, ascending).
    Pulled {
        at: &'u str,
        len: usize,
        removed: Vec<(usize, Bson)>,
    },
}

impl<'u> UndoLog<'u> {
    /// An empty log with room for the entries of `paths` operator paths.
    pub(crate) fn with_capacity(paths: usize) -> Self {
        UndoLog {
            entries: Vec::with_capacity(paths),
            changed: false,
            size_delta: 0,
        }
    }

    /// Records what the operator of `kind` at `path` is about to change in `doc`.
    pub(super) fn save(&mut self, doc: &Document, path: &'u str, kind: OpKind) {
        let kind = match kind {
            OpKind::SlicedAppend { pushed, keep } => {
                if let Some(a) = array_at(doc, path).filter(|_| pushed <= keep) {
                    // Every element pushed stays; the first `drop` of the array go.
                    let drop = (a.len() + pushed).saturating_sub(keep);
                    let undo = Undo::SlicedAppend {
                        at: path,
                        len: a.len(),
                        pushed,
                        dropped: a[..drop].to_vec(),
                    };
                    self.push(path, undo);
                    return;
                }
                kind
            }
            kind => kind,
        };
        // From here a `SlicedAppend` is a `Write`: the whole value is saved.
        let undo = match reach(doc, path) {
            Reach::Blocked => Undo::Nothing,
            Reach::MissingField { end } => match kind {
                // Only creating operators change anything below a missing field.
                OpKind::Write | OpKind::Append | OpKind::SlicedAppend { .. } => Undo::Value {
                    at: &path[..end],
                    old: None,
                    index: None,
                },
                OpKind::Unset | OpKind::Pull => Undo::Nothing,
            },
            Reach::MissingElement { array_end, len } => match kind {
                OpKind::Write | OpKind::Append | OpKind::SlicedAppend { .. } => Undo::Appended {
                    at: &path[..array_end],
                    len,
                },
                OpKind::Unset | OpKind::Pull => Undo::Nothing,
            },
            Reach::Parent(container, last_start) => {
                let last = &path[last_start..];
                let current = match container {
                    Container::Doc(d) => d.get(last),
                    Container::Arr(a) => match array_index(last) {
                        // Setting a new field on an array fails.
                        None => {
                            self.push(path, Undo::Nothing);
                            return;
                        }
                        Some(i) if i >= a.len() => {
                            let undo = match kind {
                                OpKind::Write | OpKind::Append | OpKind::SlicedAppend { .. } => {
                                    Undo::Appended {
                                        at: &path[..last_start - 1],
                                        len: a.len(),
                                    }
                                }
                                OpKind::Unset | OpKind::Pull => Undo::Nothing,
                            };
                            self.push(path, undo);
                            return;
                        }
                        Some(i) => Some(&a[i]),
                    },
                };
                match (kind, current) {
                    (OpKind::Append, Some(Bson::Array(a))) => Undo::Appended {
                        at: path,
                        len: a.len(),
                    },
                    (OpKind::Pull, Some(Bson::Array(a))) => Undo::Pulled {
                        at: path,
                        len: a.len(),
                        removed: Vec::new(),
                    },
                    // A type mismatch: the operator fails without changing anything.
                    (OpKind::Append | OpKind::Pull, Some(_)) => Undo::Nothing,
                    (OpKind::Pull | OpKind::Unset, None) => Undo::Nothing,
                    (OpKind::Unset, Some(old)) => Undo::Value {
                        at: path,
                        old: Some(old.clone()),
                        index: match container {
                            Container::Doc(d) => d.keys().position(|k| k == last),
                            Container::Arr(_) => None,
                        },
                    },
                    (OpKind::Write | OpKind::Append | OpKind::SlicedAppend { .. }, current) => {
                        Undo::Value {
                            at: path,
                            old: current.cloned(),
                            index: None,
                        }
                    }
                }
            }
        };
        self.push(path, undo);
    }

    fn push(&mut self, path: &'u str, undo: Undo<'u>) {
        self.entries.push(Entry { path, undo });
    }

    /// Where the `$pull` just saved collects the elements it removes.
    pub(super) fn pulled(&mut self) -> Option<&mut Vec<(usize, Bson)>> {
        match self.entries.last_mut() {
            Some(Entry {
                undo: Undo::Pulled { removed, .. },
                ..
            }) => Some(removed),
            _ => None,
        }
    }

    /// Notes what the operator just saved and applied changed in `doc`.
    pub(super) fn measure(&mut self, doc: &Document) {
        let Some(entry) = self.entries.last() else {
            return;
        };
        let (changed, delta) = match &entry.undo {
            Undo::Nothing => (false, 0),
            Undo::Value { at, old, .. } => {
                let new = lookup(doc, at);
                let changed = new != old.as_ref();
                let delta = match (old, new) {
                    (Some(old), Some(new)) => {
                        size::value_len(new) as isize - size::value_len(old) as isize
                    }
                    // A new field of a document (new array elements are `Appended`).
                    (None, Some(new)) => {
                        (2 + last_segment(at).len() + size::value_len(new)) as isize
                    }
                    (Some(old), None) => {
                        -((2 + last_segment(at).len() + size::value_len(old)) as isize)
                    }
                    (None, None) => 0,
                };
                (changed, delta)
            }
            Undo::Appended { at, len } => match lookup(doc, at) {
                Some(Bson::Array(a)) if a.len() > *len => {
                    let added: usize = a[*len..]
                        .iter()
                        .enumerate()
                        .map(|(i, e)| size::array_element_len(len + i, e))
                        .sum();
                    (true, added as isize)
                }
                _ => (false, 0),
            },
            Undo::SlicedAppend {
                at,
                len,
                pushed,
                dropped,
            } => match lookup(doc, at) {
                Some(Bson::Array(now)) => {
                    let drop = dropped.len();
                    // Before: `dropped` then the first `len - drop` elements now.
                    let was = |i: usize| {
                        if i < drop {
                            &dropped[i]
                        } else {
                            &now[i - drop]
                        }
                    };
                    let changed = now.len() != *len || (0..*len).any(|i| was(i) != &now[i]);
                    // The kept elements only moved: measured are the keys,
                    // the values dropped and the values pushed, not the array.
                    let kept = len - drop;
                    debug_assert_eq!(now.len(), kept + pushed);
                    let values =
                        |a: &[Bson]| a.iter().map(|e| 2 + size::value_len(e)).sum::<usize>();
                    let added = values(now.get(kept..).unwrap_or_default());
                    let delta = (size::key_digits(now.len()) + added) as isize
                        - (size::key_digits(*len) + values(dropped)) as isize;
                    (changed, delta)
                }
                _ => (false, 0),
            },
            Undo::Pulled { len, removed, .. } => {
                let values: usize = removed.iter().map(|(_, e)| 2 + size::value_len(e)).sum();
                let keys = size::key_digits(*len) - size::key_digits(len - removed.len());
                (!removed.is_empty(), -((values + keys) as isize))
            }
        };
        self.changed |= changed;
        self.size_delta += delta;
    }

    /// How much the operators applied so far changed the document's BSON size.
    pub(crate) fn size_delta(&self) -> isize {
        self.size_delta
    }

    /// Whether `doc` differs from what it was when the changes were saved,
    /// as comparing each top-level field touched with `Bson`'s `==` tells (so
    /// a touched field holding a NaN counts as changed, the NaN being unequal
    /// to itself).
    pub(crate) fn changed(&self, doc: &Document) -> bool {
        self.changed
            || self.entries.iter().any(|e| {
                let key = split_dot(e.path).map_or(e.path, |(first, _)| first);
                doc.get(key).is_some_and(contains_nan)
            })
    }

    /// Restores `doc` as it was, field order included.
    pub(crate) fn rollback(self, doc: &mut Document) {
        // In reverse: each entry then sees the document as its operator left it.
        for entry in self.entries.into_iter().rev() {
            match entry.undo {
                Undo::Nothing => {}
                Undo::Value { at, old, index } => restore(doc, at, old, index),
                Undo::Appended { at, len } => {
                    if let Some(Bson::Array(a)) = lookup_mut(doc, at) {
                        a.truncate(len);
                    }
                }
                Undo::SlicedAppend {
                    at,
                    len,
                    pushed,
                    dropped,
                    ..
                } => {
                    if let Some(Bson::Array(a)) = lookup_mut(doc, at) {
                        // Only as the operator left it (it cannot fail on an array).
                        if a.len() == len - dropped.len() + pushed {
                            a.truncate(len - dropped.len());
                            let mut was = dropped;
                            was.append(a);
                            *a = was;
                        }
                    }
                }
                Undo::Pulled { at, removed, .. } => {
                    if removed.is_empty() {
                        continue;
                    }
                    if let Some(Bson::Array(a)) = lookup_mut(doc, at) {
                        let kept = std::mem::take(a);
                        let mut kept = kept.into_iter();
                        let mut merged = Vec::with_capacity(kept.len() + removed.len());
                        for (i, e) in removed {
                            while merged.len() < i {
                                match kept.next() {
                                    Some(k) => merged.push(k),
                                    None => break,
                                }
                            }
                            merged.push(e);
                        }
                        merged.extend(kept);
                        *a = merged;
                    }
                }
            }
        }
    }
}

/// Puts `old` back at path `at` of `doc` (removes what is there if `None`).
fn restore(doc: &mut Document, at: &str, old: Option<Bson>, index: Option<usize>) {
    let Ok(Some((parent, last))) = parent(doc, at, false) else {
        return;
    };
    match (parent, old) {
        (Parent::Doc(d), None) => {
            d.remove(last);
        }
        (Parent::Doc(d), Some(old)) => match d.get_mut(last) {
            Some(slot) => *slot = old,
            // Removed by `$unset`: back to where it was.
            None => insert_at(d, index, last, old),
        },
        (Parent::Arr(a, _), old) => {
            if let Some(slot) = array_index(last).and_then(|i| a.get_mut(i)) {
                *slot = old.unwrap_or(Bson::Null);
            }
        }
    }
}

/// The last segment of a dotted path.
fn last_segment(path: &str) -> &str {
    path.rfind('.').map_or(path, |i| &path[i + 1..])
}

/// Whether `v` is or holds a Double NaN.
fn contains_nan(v: &Bson) -> bool {
    match v {
        Bson::Double(f) => f.is_nan(),
        Bson::Document(d) => d.values().any(contains_nan),
        Bson::Array(a) => a.iter().any(contains_nan),
        Bson::JavaScriptCodeWithScope(c) => c.scope.values().any(contains_nan),
        _ => false,
    }
}

/// The array at `path` of `doc`, reached as [`reach`] does (a document's
/// field or an array's element at every segment).
fn array_at<'d>(doc: &'d Document, path: &str) -> Option<&'d [Bson]> {
    let Reach::Parent(container, last_start) = reach(doc, path) else {
        return None;
    };
    let last = &path[last_start..];
    let value = match container {
        Container::Doc(d) => d.get(last),
        Container::Arr(a) => a.get(array_index(last)?),
    };
    match value {
        Some(Bson::Array(a)) => Some(a),
        _ => None,
    }
}

/// The value at `path` of `doc`, as [`lookup`] finds it, mutably.
fn lookup_mut<'a>(doc: &'a mut Document, path: &str) -> Option<&'a mut Bson> {
    match parent(doc, path, false) {
        Ok(Some((Parent::Doc(d), last))) => d.get_mut(last),
        Ok(Some((Parent::Arr(a, _), last))) => a.get_mut(array_index(last)?),
        _ => None,
    }
}

/// A document or an array met on a path.
#[derive(Clone, Copy)]
enum Container<'d> {
    Doc(&'d Document),
    Arr(&'d [Bson]),
}

/// How far a path reaches into a document.
enum Reach<'d> {
    /// Every segment but the last exists: the container of the last, and
    /// where the last segment starts in the path.
    Parent(Container<'d>, usize),
    /// The segment ending at byte `end` of the path is missing from a document.
    MissingField { end: usize },
    /// A segment indexes past the end of the array (of `len` elements) whose
    /// path ends at byte `array_end`.
    MissingElement { array_end: usize, len: usize },
    /// The path runs through a scalar, or through an array by a non-numeric
    /// segment.
    Blocked,
}

/// Walks `path` in `doc` as [`parent`] does, without creating anything.
fn reach<'d>(doc: &'d Document, path: &str) -> Reach<'d> {
    let mut container = Container::Doc(doc);
    let mut start = 0;
    loop {
        let end = match path[start..].find('.') {
            None => return Reach::Parent(container, start),
            Some(i) => start + i,
        };
        let seg = &path[start..end];
        let child = match container {
            Container::Doc(d) => match d.get(seg) {
                Some(child) => child,
                None => return Reach::MissingField { end },
            },
            Container::Arr(a) => match array_index(seg) {
                None => return Reach::Blocked,
                Some(i) if i >= a.len() => {
                    return Reach::MissingElement {
                        array_end: start - 1,
                        len: a.len(),
                    }
                }
                Some(i) => &a[i],
            },
        };
        container = match child {
            Bson::Document(d) => Container::Doc(d),
            Bson::Array(a) => Container::Arr(a),
            _ => return Reach::Blocked,
        };
        start = end + 1;
    }
}

/// Inserts a field at position `index` (at the end if `None` or past it).
fn insert_at(doc: &mut Document, index: Option<usize>, key: &str, value: Bson) {
    let index = index.unwrap_or(usize::MAX);
    if index >= doc.len() {
        doc.insert(key, value);
        return;
    }
    let mut rebuilt = Document::new();
    let mut field = Some((key, value));
    for (k, v) in std::mem::take(doc) {
        if rebuilt.len() == index {
            if let Some((key, value)) = field.take() {
                rebuilt.insert(key, value);
            }
        }
        rebuilt.insert(k, v);
    }
    *doc = rebuilt;
}
