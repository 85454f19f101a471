//! `$expr`: the supported aggregation expressions, on a validated expression.

use std::borrow::Cow;

use bson::{Bson, Document};

use super::eval::truthy;
use super::validate::expr_args;
use super::{bad_request, split_dot, total_cmp, type_name, Ctx, CONVERSION_FAILURE};
use crate::store::{StoreError, StoreErrorKind};

/// The only variable `$expr` supports.
pub(super) const NOW: &str = "$$NOW";

/// What a missing value compares as: MongoDB ranks missing with undefined,
/// below null.
static MISSING: Bson = Bson::Undefined;

/// The value of an expression: borrowed from the document or the filter when
/// it can be, `None` for a missing field.
type Value<'a> = Option<Cow<'a, Bson>>;

/// Whether `{$expr: expr}` holds for `doc`: the value of `expr`, coerced to a
/// boolean as MongoDB does. An error is left in `cx`, and the clause is false.
pub(super) fn eval_expr_filter(doc: &Document, expr: &Bson, cx: &Ctx<'_>) -> bool {
    match eval_expr(doc, expr, cx) {
        Ok(v) => expr_truthy(v.as_deref()),
        Err(e) => {
            cx.fail(e);
            false
        }
    }
}

/// An aggregation expression's boolean value: false for false, null,
/// undefined, missing and numeric zeros (but not NaN), true for anything else.
fn expr_truthy(v: Option<&Bson>) -> bool {
    v.is_some_and(truthy)
}

pub(super) fn eval_expr<'a>(
    doc: &'a Document,
    expr: &'a Bson,
    cx: &Ctx<'_>,
) -> Result<Value<'a>, StoreError> {
    match expr {
        Bson::String(s) if s.starts_with("$$") => {
            if s != NOW {
                return Err(bad_request(format!("unsupported variable in $expr: {s}")));
            }
            Ok(Some(Cow::Owned(Bson::DateTime(cx.now()?))))
        }
        Bson::String(s) if s.starts_with('$') => Ok(field_path(doc, &s[1..])),
        Bson::Document(d) => match d.iter().next() {
            Some((op, value)) if op == "$literal" => Ok(Some(Cow::Borrowed(value))),
            Some((op, args)) => eval_expr_operator(doc, op, expr_args(args), cx),
            None => Ok(Some(Cow::Borrowed(expr))),
        },
        _ => Ok(Some(Cow::Borrowed(expr))),
    }
}

fn eval_expr_operator<'a>(
    doc: &'a Document,
    op: &str,
    args: &'a [Bson],
    cx: &Ctx<'_>,
) -> Result<Value<'a>, StoreError> {
    let boolean = |b: bool| Ok(Some(Cow::Owned(Bson::Boolean(b))));
    match op {
        "$and" => {
            for arg in args {
                if !expr_truthy(eval_expr(doc, arg, cx)?.as_deref()) {
                    return boolean(false);
                }
            }
            boolean(true)
        }
        "$or" => {
            for arg in args {
                if expr_truthy(eval_expr(doc, arg, cx)?.as_deref()) {
                    return boolean(true);
                }
            }
            boolean(false)
        }
        "$toLong" => {
            let [arg] = args else {
                return Err(bad_request("Expression $toLong takes exactly 1 arguments."));
            };
            let v = eval_expr(doc, arg, cx)?;
            Ok(Some(Cow::Owned(to_long(v.as_deref())?)))
        }
        "$ifNull" => {
            let [value, otherwise] = args else {
                return Err(bad_request("Expression $ifNull takes exactly 2 arguments."));
            };
            match eval_expr(doc, value, cx)? {
                Some(v) if !matches!(v.as_ref(), Bson::Null | Bson::Undefined) => Ok(Some(v)),
                _ => eval_expr(doc, otherwise, cx),
            }
        }
        "$subtract" => {
            let [left, right] = args else {
                return Err(bad_request(
                    "Expression $subtract takes exactly 2 arguments.",
                ));
            };
            let left = eval_expr(doc, left, cx)?;
            let right = eval_expr(doc, right, cx)?;
            Ok(Some(Cow::Owned(subtract(
                left.as_deref(),
                right.as_deref(),
            )?)))
        }
        _ => {
            let [left, right] = args else {
                return Err(bad_request(format!(
                    "Expression {op} takes exactly 2 arguments."
                )));
            };
            let left = eval_expr(doc, left, cx)?;
            let right = eval_expr(doc, right, cx)?;
            let o = total_cmp(
                left.as_deref().unwrap_or(&MISSING),
                right.as_deref().unwrap_or(&MISSING),
            );
            boolean(match op {
                "$lt" => o.is_lt(),
                "$lte" => o.is_le(),
                "$gt" => o.is_gt(),
                "$gte" => o.is_ge(),
                "$eq" => o.is_eq(),
                "$ne" => o.is_ne(),
                _ => {
                    return Err(bad_request(format!(
                        "unsupported expression operator in $expr: {op}"
                    )))
                }
            })
        }
    }
}

/// The value of the aggregation field path `path` (without its `$`): as
/// [`lookup`](super::lookup) finds it, except at an array, whose document elements each
/// give the value of the rest of the path (if any), collected into an array.
/// Numeric segments are field names, as in MongoDB's expressions.
fn field_path<'a>(doc: &'a Document, path: &str) -> Value<'a> {
    let Some((seg, rest)) = split_dot(path) else {
        return doc.get(path).map(Cow::Borrowed);
    };
    match doc.get(seg)? {
        Bson::Document(d) => field_path(d, rest),
        Bson::Array(elements) => Some(Cow::Owned(Bson::Array(
            elements
                .iter()
                .filter_map(|e| match e {
                    Bson::Document(d) => field_path(d, rest).map(Cow::into_owned),
                    _ => None,
                })
                .collect(),
        ))),
        _ => None,
    }
}

/// `$subtract` of two numbers: null if either is null or missing; a 32-bit
/// result when both are 32-bit and it fits, else 64-bit, else (or with a
/// double) a double, as MongoDB computes it.
fn subtract(left: Option<&Bson>, right: Option<&Bson>) -> Result<Bson, StoreError> {
    let (Some(left), Some(right)) = (left, right) else {
        return Ok(Bson::Null);
    };
    Ok(match (left, right) {
        (Bson::Null | Bson::Undefined, _) | (_, Bson::Null | Bson::Undefined) => Bson::Null,
        (Bson::Int32(a), Bson::Int32(b)) => match a.checked_sub(*b) {
            Some(n) => Bson::Int32(n),
            None => Bson::Int64(i64::from(*a) - i64::from(*b)),
        },
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => {
            let long = |v: &Bson| match v {
                Bson::Int32(n) => i64::from(*n),
                Bson::Int64(n) => *n,
                _ => 0,
            };
            match long(left).checked_sub(long(right)) {
                Some(n) => Bson::Int64(n),
                None => Bson::Double(long(left) as f64 - long(right) as f64),
            }
        }
        (
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_),
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_),
        ) => Bson::Double(number_f64(left) - number_f64(right)),
        (Bson::DateTime(a), Bson::DateTime(b)) => {
            Bson::Int64(a.timestamp_millis().saturating_sub(b.timestamp_millis()))
        }
        _ => {
            return Err(bad_request(format!(
                "can't $subtract {} from {}",
                type_name(right),
                type_name(left)
            ))
            .with_code(16556))
        }
    })
}

fn number_f64(v: &Bson) -> f64 {
    match v {
        Bson::Int32(n) => f64::from(*n),
        Bson::Int64(n) => *n as f64,
        Bson::Double(d) => *d,
        _ => f64::NAN,
    }
}

/// `$toLong`: the value converted to an Int64, or null for null or missing.
fn to_long(v: Option<&Bson>) -> Result<Bson, StoreError> {
    // 2^63, exactly representable as f64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    let failed = |message: String| {
        let kind = if message.contains("overflow") {
            StoreErrorKind::Overflow
        } else {
            StoreErrorKind::Other
        };
        Err(StoreError::new(kind, message).with_code(CONVERSION_FAILURE))
    };
    let n = match v {
        None | Some(Bson::Null | Bson::Undefined) => return Ok(Bson::Null),
        Some(Bson::Int32(i)) => i64::from(*i),
        Some(Bson::Int64(i)) => *i,
        Some(Bson::Boolean(b)) => i64::from(*b),
        Some(Bson::DateTime(d)) => d.timestamp_millis(),
        Some(Bson::Double(f)) if f.is_nan() => {
            return failed(
                "Attempt to convert NaN value to integer type in $convert with no onError value"
                    .into(),
            )
        }
        Some(Bson::Double(f)) if f.is_infinite() => return failed(
            "Attempt to convert infinity value to integer type in $convert with no onError value"
                .into(),
        ),
        Some(Bson::Double(f)) => {
            let t = f.trunc();
            if !(-TWO_63..TWO_63).contains(&t) {
                return failed(format!(
                    "Conversion would overflow target type in $convert with no onError value: {f}"
                ));
            }
            // In range, so the conversion is exact.
            t as i64
        }
        Some(Bson::String(s)) => match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) => {
                return failed(format!(
                    "Failed to parse number '{s}' in $convert with no onError value"
                ))
            }
        },
        Some(other) => {
            return failed(format!(
                "Unsupported conversion from {} to long in $convert with no onError value",
                type_name(other)
            ))
        }
    };
    Ok(Bson::Int64(n))
}
