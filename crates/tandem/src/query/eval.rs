//! Evaluation of a validated filter.

use std::cmp::Ordering;

use bson::{Bson, Document};

use super::decimal::Exact;
use super::expr::eval_expr_filter;
use super::order::same_str;
use super::{array_index, compare, is_operator_doc, split_dot, values_equal, Ctx};

/// Whether `doc` matches `filter`, which [`validate`](super::validate()) accepted, with no
/// `$$NOW` (for `$pull` conditions, where `$expr` is not allowed).
pub(crate) fn eval(doc: &Document, filter: &Document) -> bool {
    eval_skipping(doc, filter, None, &Ctx::at(None))
}

/// Whether `doc` matches `filter`, which [`validate`](super::validate()) accepted, ignoring the
/// top-level clause on field `skip` (which the caller has already checked,
/// e.g. an `_id` equality answered by a look-up). An `$expr` takes `$$NOW`
/// from `cx`, and leaves there the error it may raise (it is then false).
pub(crate) fn eval_skipping(
    doc: &Document,
    filter: &Document,
    skip: Option<&str>,
    cx: &Ctx<'_>,
) -> bool {
    filter.iter().all(|(key, value)| match key.as_str() {
        k if Some(k) == skip => true,
        "$and" => members(value).all(|m| eval_skipping(doc, m, None, cx)),
        "$or" => members(value).any(|m| eval_skipping(doc, m, None, cx)),
        "$nor" => !members(value).any(|m| eval_skipping(doc, m, None, cx)),
        "$expr" => eval_expr_filter(doc, value, cx),
        path => eval_condition(doc, path, value),
    })
}

fn members(value: &Bson) -> impl Iterator<Item = &Document> {
    let members: &[Bson] = match value {
        Bson::Array(a) => a,
        _ => &[],
    };
    members.iter().filter_map(Bson::as_document)
}

/// Whether the field at `path` satisfies `cond` (an operator document or a value).
fn eval_condition(doc: &Document, path: &str, cond: &Bson) -> bool {
    match cond {
        Bson::Document(ops) if is_operator_doc(ops) => ops
            .iter()
            .all(|(op, arg)| eval_operator(doc, path, op, arg)),
        _ => any_equal(doc, path, cond),
    }
}

/// Whether a value at `path` equals `arg`, or is an array holding it.
pub(super) fn any_equal(doc: &Document, path: &str, arg: &Bson) -> bool {
    match arg {
        // The common case (ids, states, the marker and tombstone arrays),
        // without the general comparison: only strings and symbols of the
        // same bytes equal a string, and an array or a missing value never does.
        Bson::String(s) => {
            let same = |x: &Bson| matches!(x, Bson::String(x) | Bson::Symbol(x) if same_str(x, s));
            any_value(doc, path, &mut |v| match v {
                Found::Missing => false,
                Found::Field(Bson::Array(elements)) => elements.iter().any(same),
                Found::Field(x) | Found::Element(x) => same(x),
            })
        }
        _ => any_value(doc, path, &mut |v| {
            test_value(v, &mut |x| values_equal(x, arg))
        }),
    }
}

fn eval_operator(doc: &Document, path: &str, op: &str, arg: &Bson) -> bool {
    let test = |t: &mut dyn FnMut(&Bson) -> bool| any_value(doc, path, &mut |v| test_value(v, t));
    match op {
        "$eq" => any_equal(doc, path, arg),
        "$ne" => !any_equal(doc, path, arg),
        "$gt" => test(&mut |x| in_range(x, arg) == Some(Ordering::Greater)),
        "$gte" => {
            test(&mut |x| matches!(in_range(x, arg), Some(Ordering::Greater | Ordering::Equal)))
        }
        "$lt" => test(&mut |x| in_range(x, arg) == Some(Ordering::Less)),
        "$lte" => test(&mut |x| matches!(in_range(x, arg), Some(Ordering::Less | Ordering::Equal))),
        "$in" => test(&mut |x| in_list(x, arg)),
        "$nin" => !test(&mut |x| in_list(x, arg)),
        "$exists" => any_value(doc, path, &mut |v| v.value().is_some()) == truthy(arg),
        // A value of one of the named types, or an array holding one (an
        // array itself only for "array"); never a missing field.
        "$type" => {
            let names = match arg {
                Bson::Array(names) => names.as_slice(),
                one => std::slice::from_ref(one),
            };
            let is = |x: &Bson| {
                names.iter().any(|n| match n {
                    Bson::String(n) => has_type(x, n),
                    _ => false,
                })
            };
            any_value(doc, path, &mut |v| v.each(&mut |x| is(x)))
        }
        "$not" => match arg {
            Bson::Document(inner) => !inner
                .iter()
                .all(|(op, arg)| eval_operator(doc, path, op, arg)),
            _ => false,
        },
        _ => false,
    }
}

/// How a value compares with a range operator's bound, as MongoDB's
/// `ComparisonMatchExpression` does: as [`compare`], except that MinKey and
/// MaxKey bound values of every type, and that NaN lies in no range (equal
/// only to NaN, neither below nor above any number). `None`: no range holds.
fn in_range(x: &Bson, bound: &Bson) -> Option<Ordering> {
    let nan = |v: &Bson| match v {
        Bson::Double(f) => f.is_nan(),
        Bson::Decimal128(_) => crate::query::Exact::of(v).is_some_and(|e| e.is_nan()),
        _ => false,
    };
    match compare(x, bound) {
        None => match bound {
            Bson::MaxKey => Some(Ordering::Less),
            Bson::MinKey => Some(Ordering::Greater),
            _ => None,
        },
        Some(o) => match (nan(x), nan(bound)) {
            (false, false) => Some(o),
            (true, true) => Some(Ordering::Equal),
            _ => None,
        },
    }
}

/// Evaluates an operator document (already validated) against one value,
/// as `$pull` does with a condition such as `{$gte: 6}`.
pub(crate) fn eval_operators_on(value: &Bson, ops: &Document) -> bool {
    let wrapper = {
        let mut d = Document::new();
        d.insert("v", value.clone());
        d
    };
    ops.iter()
        .all(|(op, arg)| eval_operator(&wrapper, "v", op, arg))
}

fn in_list(x: &Bson, list: &Bson) -> bool {
    match list {
        Bson::Array(values) => values.iter().any(|v| values_equal(x, v)),
        _ => false,
    }
}

pub(super) fn truthy(v: &Bson) -> bool {
    match v {
        Bson::Boolean(b) => *b,
        Bson::Int32(i) => *i != 0,
        Bson::Int64(i) => *i != 0,
        Bson::Double(f) => *f != 0.0,
        Bson::Decimal128(_) => !Exact::of(v).is_some_and(|e| e.is_zero()),
        Bson::Null | Bson::Undefined => false,
        _ => true,
    }
}

/// Applies a value test to one value found at a path: a missing value tests
/// as null; an array passes if it passes as a whole or any element passes,
/// unless it is `whole` (an array's element the path names by its index,
/// which MongoDB does not look into).
pub(super) fn test_value(v: Found<'_>, t: &mut dyn FnMut(&Bson) -> bool) -> bool {
    match v {
        Found::Missing => t(&Bson::Null),
        found => found.each(t),
    }
}

/// What a path reaches in a document.
#[derive(Clone, Copy, Debug)]
pub(super) enum Found<'a> {
    /// Nothing: a dead end.
    Missing,
    /// A field's value (an array is tested whole and element by element).
    Field(&'a Bson),
    /// An array's element named by its index at the end of the path, as in
    /// `a.0` (tested whole: `{"a.0": 5}` does not match `{a: [[5]]}`).
    Element(&'a Bson),
}

impl<'a> Found<'a> {
    /// The value reached, if any.
    pub(super) fn value(self) -> Option<&'a Bson> {
        match self {
            Found::Missing => None,
            Found::Field(v) | Found::Element(v) => Some(v),
        }
    }

    /// The values a test looks at: an array [`Field`](Found::Field)'s
    /// elements too.
    fn each(self, t: &mut dyn FnMut(&Bson) -> bool) -> bool {
        match self {
            Found::Missing => false,
            Found::Field(whole @ Bson::Array(elements)) => t(whole) || elements.iter().any(t),
            Found::Field(x) | Found::Element(x) => t(x),
        }
    }
}

/// Calls `f` on each value `path` reaches in `doc` ([`Found::Missing`] for a
/// dead end), descending into arrays of documents as MongoDB does; true if
/// any call is.
pub(super) fn any_value(doc: &Document, path: &str, f: &mut dyn FnMut(Found<'_>) -> bool) -> bool {
    match split_dot(path) {
        None => f(doc.get(path).map_or(Found::Missing, Found::Field)),
        Some((seg, rest)) => match doc.get(seg) {
            None => f(Found::Missing),
            Some(v) => any_value_in(v, rest, f),
        },
    }
}

fn any_value_in(v: &Bson, path: &str, f: &mut dyn FnMut(Found<'_>) -> bool) -> bool {
    match v {
        Bson::Document(d) => any_value(d, path, f),
        Bson::Array(elements) => {
            let (seg, rest) = match split_dot(path) {
                None => (path, None),
                Some((seg, rest)) => (seg, Some(rest)),
            };
            if let Some(i) = array_index(seg) {
                // The documents among the elements, whose field the segment
                // may name (`m.0` reaches `"x"` in `{m: [{"0": "x"}]}`), and
                // the element at the index.
                let in_documents = elements.iter().any(|e| match e {
                    Bson::Document(d) => any_value(d, path, f),
                    _ => false,
                });
                return in_documents
                    || match (elements.get(i), rest) {
                        (None, _) => f(Found::Missing),
                        (Some(e), None) => f(Found::Element(e)),
                        (Some(e), Some(rest)) => any_value_in(e, rest, f),
                    };
            }
            // Only the documents among the elements are looked into: an
            // empty array, a scalar or a nested array yields no value, not
            // even a missing one (so `{"a.b": null}` does not match
            // `{a: [1, 2]}` or `{a: []}`, as in MongoDB up to 8.x; 9.0 changed
            // it, SERVER-36681).
            elements.iter().any(|e| match e {
                Bson::Document(d) => any_value(d, path, f),
                _ => false,
            })
        }
        _ => f(Found::Missing),
    }
}

/// Every type name `$type` knows (beside the alias `"number"`): those of
/// [`type_name`](super::type_name).
pub(crate) const TYPE_NAMES: [&str; 21] = [
    "double",
    "string",
    "object",
    "array",
    "binData",
    "undefined",
    "objectId",
    "bool",
    "date",
    "null",
    "regex",
    "dbPointer",
    "javascript",
    "symbol",
    "javascriptWithScope",
    "int",
    "timestamp",
    "long",
    "decimal",
    "minKey",
    "maxKey",
];

/// Whether `name` is a type's name `$type` knows: one of
/// [`TYPE_NAMES`], or `"number"`.
pub(super) fn is_type_name(name: &str) -> bool {
    name == "number" || TYPE_NAMES.contains(&name)
}

/// Whether `x` is of the type `name` ([`is_type_name`]).
fn has_type(x: &Bson, name: &str) -> bool {
    let own = super::type_name(x);
    own == name || (name == "number" && matches!(own, "double" | "int" | "long" | "decimal"))
}
