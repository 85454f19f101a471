//! `$expr`: the supported aggregation expressions, on a validated expression.

use std::borrow::Cow;

use bson::{Bson, Document};

use super::decimal::Exact;
use super::decimal_arith;
use super::eval::truthy;
use super::validate::expr_args;
use super::{bad_request, split_dot, total_cmp, type_name, Ctx, CONVERSION_FAILURE};
use crate::store::{StoreError, StoreErrorKind};

/// The store's clock, a system variable `$expr` supports.
pub(super) const NOW: &str = "$$NOW";

/// The document itself, the other system variable `$expr` supports.
const ROOT: &str = "ROOT";

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
    eval_in(doc, expr, None, cx)
}

/// The variables `$let` bound around an expression, innermost first.
struct Vars<'v, 'a> {
    name: &'a str,
    value: Value<'a>,
    outer: Option<&'v Vars<'v, 'a>>,
}

impl<'a> Vars<'_, 'a> {
    fn get(&self, name: &str) -> Option<&Value<'a>> {
        if self.name == name {
            Some(&self.value)
        } else {
            self.outer.and_then(|o| o.get(name))
        }
    }
}

/// [`eval_expr`] with the variables `vars` in scope.
fn eval_in<'a>(
    doc: &'a Document,
    expr: &'a Bson,
    vars: Option<&Vars<'_, 'a>>,
    cx: &Ctx<'_>,
) -> Result<Value<'a>, StoreError> {
    match expr {
        Bson::String(s) if s.starts_with("$$") => {
            if s == NOW {
                return Ok(Some(Cow::Owned(Bson::DateTime(cx.now()?))));
            }
            let (name, rest) = match split_dot(&s[2..]) {
                Some((name, rest)) => (name, Some(rest)),
                None => (&s[2..], None),
            };
            if name == ROOT && vars.and_then(|v| v.get(name)).is_none() {
                return Ok(match rest {
                    None => Some(Cow::Owned(Bson::Document(doc.clone()))),
                    Some(rest) => field_path(doc, rest),
                });
            }
            let Some(value) = vars.and_then(|v| v.get(name)) else {
                return Err(bad_request(format!("unsupported variable in $expr: {s}")));
            };
            Ok(match rest {
                None => value.clone(),
                Some(rest) => value
                    .as_deref()
                    .and_then(|v| value_path(v, rest))
                    .map(|v| Cow::Owned(v.into_owned())),
            })
        }
        Bson::String(s) if s.starts_with('$') => Ok(field_path(doc, &s[1..])),
        Bson::Document(d) => match d.iter().next() {
            Some((op, value)) if op == "$literal" => Ok(Some(Cow::Borrowed(value))),
            Some((op, Bson::Document(spec))) if op == "$let" => eval_let(doc, spec, vars, cx),
            Some((op, args)) => eval_expr_operator(doc, op, expr_args(args), vars, cx),
            None => Ok(Some(Cow::Borrowed(expr))),
        },
        _ => Ok(Some(Cow::Borrowed(expr))),
    }
}

/// `$let: {vars: {name: expr, ...}, in: expr}`: `in` with the variables
/// bound (each evaluated outside the others, as in MongoDB).
fn eval_let<'a>(
    doc: &'a Document,
    spec: &'a Document,
    vars: Option<&Vars<'_, 'a>>,
    cx: &Ctx<'_>,
) -> Result<Value<'a>, StoreError> {
    let (Ok(bound), Some(body)) = (spec.get_document("vars"), spec.get("in")) else {
        return Err(bad_request("$let needs 'vars' and 'in'"));
    };
    let mut values = Vec::with_capacity(bound.len());
    for (name, expr) in bound {
        values.push((name.as_str(), eval_in(doc, expr, vars, cx)?));
    }
    eval_bound(doc, body, values, vars, cx)
}

/// `body` with `values` bound on top of `outer`, one scope per variable.
fn eval_bound<'a>(
    doc: &'a Document,
    body: &'a Bson,
    mut values: Vec<(&'a str, Value<'a>)>,
    outer: Option<&Vars<'_, 'a>>,
    cx: &Ctx<'_>,
) -> Result<Value<'a>, StoreError> {
    match values.pop() {
        None => eval_in(doc, body, outer, cx),
        Some((name, value)) => {
            let scope = Vars { name, value, outer };
            eval_bound(doc, body, values, Some(&scope), cx)
        }
    }
}

fn eval_expr_operator<'a>(
    doc: &'a Document,
    op: &str,
    args: &'a [Bson],
    vars: Option<&Vars<'_, 'a>>,
    cx: &Ctx<'_>,
) -> Result<Value<'a>, StoreError> {
    let boolean = |b: bool| Ok(Some(Cow::Owned(Bson::Boolean(b))));
    match op {
        "$and" => {
            for arg in args {
                if !expr_truthy(eval_in(doc, arg, vars, cx)?.as_deref()) {
                    return boolean(false);
                }
            }
            boolean(true)
        }
        "$or" => {
            for arg in args {
                if expr_truthy(eval_in(doc, arg, vars, cx)?.as_deref()) {
                    return boolean(true);
                }
            }
            boolean(false)
        }
        "$toLong" => {
            let [arg] = args else {
                return Err(bad_request("Expression $toLong takes exactly 1 arguments."));
            };
            let v = eval_in(doc, arg, vars, cx)?;
            Ok(Some(Cow::Owned(to_long(v.as_deref())?)))
        }
        "$ifNull" => {
            let [value, otherwise] = args else {
                return Err(bad_request("Expression $ifNull takes exactly 2 arguments."));
            };
            match eval_in(doc, value, vars, cx)? {
                Some(v) if !matches!(v.as_ref(), Bson::Null | Bson::Undefined) => Ok(Some(v)),
                _ => eval_in(doc, otherwise, vars, cx),
            }
        }
        "$cond" => {
            let [test, then, otherwise] = args else {
                return Err(bad_request("Expression $cond takes exactly 3 arguments."));
            };
            if expr_truthy(eval_in(doc, test, vars, cx)?.as_deref()) {
                eval_in(doc, then, vars, cx)
            } else {
                eval_in(doc, otherwise, vars, cx)
            }
        }
        "$bsonSize" => {
            let [arg] = args else {
                return Err(bad_request(
                    "Expression $bsonSize takes exactly 1 arguments.",
                ));
            };
            // The document itself is measured where it is, not copied.
            if matches!(arg, Bson::String(s) if s == "$$ROOT")
                && vars.and_then(|v| v.get(ROOT)).is_none()
            {
                let n = super::size::document_len(doc);
                return Ok(Some(Cow::Owned(Bson::Int32(
                    i32::try_from(n).unwrap_or(i32::MAX),
                ))));
            }
            match eval_in(doc, arg, vars, cx)?.as_deref() {
                None | Some(Bson::Null | Bson::Undefined) => Ok(Some(Cow::Owned(Bson::Null))),
                Some(Bson::Document(d)) => {
                    let n = super::size::document_len(d);
                    Ok(Some(Cow::Owned(Bson::Int32(
                        i32::try_from(n).unwrap_or(i32::MAX),
                    ))))
                }
                Some(other) => Err(StoreError::new(
                    StoreErrorKind::BadRequest,
                    format!(
                        "$bsonSize requires a document input, found: {}",
                        type_name(other)
                    ),
                )
                .with_code(31393)),
            }
        }
        "$isArray" => {
            let [arg] = args else {
                return Err(bad_request(
                    "Expression $isArray takes exactly 1 arguments.",
                ));
            };
            let v = eval_in(doc, arg, vars, cx)?;
            boolean(matches!(v.as_deref(), Some(Bson::Array(_))))
        }
        "$type" => {
            let [arg] = args else {
                return Err(bad_request("Expression $type takes exactly 1 arguments."));
            };
            // MongoDB's alias of the value's type; "missing" for no value.
            let v = eval_in(doc, arg, vars, cx)?;
            let name = v.as_deref().map_or("missing", super::type_name);
            Ok(Some(Cow::Owned(Bson::String(name.to_owned()))))
        }
        "$isNumber" => {
            let [arg] = args else {
                return Err(bad_request(
                    "Expression $isNumber takes exactly 1 arguments.",
                ));
            };
            let v = eval_in(doc, arg, vars, cx)?;
            boolean(matches!(
                v.as_deref(),
                Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_))
            ))
        }
        "$arrayElemAt" => {
            let [array, index] = args else {
                return Err(bad_request(
                    "Expression $arrayElemAt takes exactly 2 arguments.",
                ));
            };
            let array = eval_in(doc, array, vars, cx)?;
            let index = eval_in(doc, index, vars, cx)?;
            array_elem_at(array, index.as_deref())
        }
        "$add" => {
            let mut sum = Bson::Int32(0);
            for arg in args {
                let v = eval_in(doc, arg, vars, cx)?;
                sum = add(&sum, v.as_deref())?;
            }
            Ok(Some(Cow::Owned(sum)))
        }
        "$subtract" => {
            let [left, right] = args else {
                return Err(bad_request(
                    "Expression $subtract takes exactly 2 arguments.",
                ));
            };
            let left = eval_in(doc, left, vars, cx)?;
            let right = eval_in(doc, right, vars, cx)?;
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
            let left = eval_in(doc, left, vars, cx)?;
            let right = eval_in(doc, right, vars, cx)?;
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
    value_path(doc.get(seg)?, rest)
}

/// The aggregation field path `path` read from the value `v` (a variable's):
/// a document's field, or, through an array, the values its document
/// elements give, collected into an array (as [`field_path`]).
fn value_path<'a>(v: &'a Bson, path: &str) -> Value<'a> {
    match v {
        Bson::Document(d) => field_path(d, path),
        Bson::Array(elements) => Some(Cow::Owned(Bson::Array(
            elements
                .iter()
                .filter_map(|e| match e {
                    Bson::Document(d) => field_path(d, path).map(Cow::into_owned),
                    _ => None,
                })
                .collect(),
        ))),
        _ => None,
    }
}

/// `$arrayElemAt`: the element at an index (from the end if negative);
/// missing past either end; null if either operand is null or missing; an
/// error for anything but an array and an integral index, as in MongoDB.
fn array_elem_at<'a>(array: Value<'a>, index: Option<&Bson>) -> Result<Value<'a>, StoreError> {
    let null = Ok(Some(Cow::Owned(Bson::Null)));
    let i = match index {
        None | Some(Bson::Null | Bson::Undefined) => return null,
        Some(Bson::Int32(i)) => i64::from(*i),
        Some(Bson::Int64(i)) => *i,
        Some(Bson::Double(f)) if f.fract() == 0.0 && f.abs() < 2_f64.powi(31) => *f as i64,
        Some(other) => {
            return Err(bad_request(format!(
                "$arrayElemAt's second argument must be a numeric value, but is {}",
                type_name(other)
            ))
            .with_code(28690))
        }
    };
    let len = match array.as_deref() {
        None | Some(Bson::Null | Bson::Undefined) => return null,
        Some(Bson::Array(a)) => a.len(),
        Some(other) => {
            return Err(bad_request(format!(
                "$arrayElemAt's first argument must be an array, but is {}",
                type_name(other)
            ))
            .with_code(28689))
        }
    };
    let at = if i < 0 {
        usize::try_from(i.unsigned_abs())
            .ok()
            .and_then(|back| len.checked_sub(back))
    } else {
        usize::try_from(i).ok().filter(|&i| i < len)
    };
    let Some(at) = at else {
        return Ok(None);
    };
    Ok(match array {
        Some(Cow::Borrowed(Bson::Array(a))) => Some(Cow::Borrowed(&a[at])),
        Some(Cow::Owned(Bson::Array(mut a))) => Some(Cow::Owned(a.swap_remove(at))),
        _ => None,
    })
}

/// `$subtract` of two numbers: null if either is null or missing; a 32-bit
/// result when both are 32-bit and it fits, else 64-bit, else (or with a
/// double) a double; with a decimal (and integers) a decimal, as MongoDB
/// computes it. A double and a decimal are refused.
fn subtract(left: Option<&Bson>, right: Option<&Bson>) -> Result<Bson, StoreError> {
    let (Some(left), Some(right)) = (left, right) else {
        return Ok(Bson::Null);
    };
    let long = |v: &Bson| match v {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        _ => 0,
    };
    if let Some(difference) = decimal_arith::subtract_numbers(left, right) {
        return Ok(Bson::Decimal128(difference));
    }
    Ok(match (left, right) {
        (Bson::Null | Bson::Undefined, _) | (_, Bson::Null | Bson::Undefined) => Bson::Null,
        (Bson::Int32(a), Bson::Int32(b)) => match a.checked_sub(*b) {
            Some(n) => Bson::Int32(n),
            None => Bson::Int64(i64::from(*a) - i64::from(*b)),
        },
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => {
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
        (Bson::DateTime(a), Bson::Int32(_) | Bson::Int64(_)) => Bson::DateTime(
            bson::DateTime::from_millis(a.timestamp_millis().saturating_sub(long(right))),
        ),
        // A date less a number of milliseconds, the number truncated to a
        // whole one, as MongoDB coerces it.
        (Bson::DateTime(a), Bson::Double(_) | Bson::Decimal128(_)) => {
            match Exact::of(right).map(Exact::trunc).and_then(|e| e.as_i64()) {
                Some(ms) => Bson::DateTime(bson::DateTime::from_millis(
                    a.timestamp_millis().saturating_sub(ms),
                )),
                None => {
                    return Err(bad_request(format!(
                        "can't $subtract {right} milliseconds from a date: not a whole number of milliseconds a long holds"
                    ))
                    .with_code(16556))
                }
            }
        }
        (Bson::Decimal128(_), Bson::Double(_)) | (Bson::Double(_), Bson::Decimal128(_)) => {
            // MongoDB first converts the double to a decimal of 15
            // significant digits; this store does not, and says so rather
            // than answer otherwise.
            return Err(bad_request(format!(
                "the embedded store does not $subtract a double and a decimal ({} from {})",
                type_name(right),
                type_name(left)
            )));
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

/// One step of `$add`: `sum` (the operands so far, from `0`) plus `v`: null
/// once an operand is null or missing; 32-bit while both are and it fits,
/// else 64-bit, else (or with a double) a double; with a decimal (and
/// integers) a decimal; a date plus a number of milliseconds is a date (one
/// date at most), as MongoDB computes it. A decimal with a double or a date
/// is refused.
fn add(sum: &Bson, v: Option<&Bson>) -> Result<Bson, StoreError> {
    let Some(v) = v else {
        return Ok(Bson::Null);
    };
    let long = |v: &Bson| match v {
        Bson::Int32(n) => i64::from(*n),
        Bson::Int64(n) => *n,
        _ => 0,
    };
    if let Some(sum) = decimal_arith::add_numbers(sum, v) {
        return Ok(Bson::Decimal128(sum));
    }
    Ok(match (sum, v) {
        (Bson::Null | Bson::Undefined, _) | (_, Bson::Null | Bson::Undefined) => Bson::Null,
        (Bson::Int32(a), Bson::Int32(b)) => match a.checked_add(*b) {
            Some(n) => Bson::Int32(n),
            None => Bson::Int64(i64::from(*a) + i64::from(*b)),
        },
        (Bson::Int32(_) | Bson::Int64(_), Bson::Int32(_) | Bson::Int64(_)) => {
            match long(sum).checked_add(long(v)) {
                Some(n) => Bson::Int64(n),
                None => Bson::Double(long(sum) as f64 + long(v) as f64),
            }
        }
        (
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_),
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_),
        ) => Bson::Double(number_f64(sum) + number_f64(v)),
        (Bson::DateTime(_), Bson::DateTime(_)) => {
            return Err(bad_request("only one date allowed in an $add expression").with_code(16612))
        }
        (Bson::DateTime(d), n @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)))
        | (n @ (Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)), Bson::DateTime(d)) => {
            // Milliseconds; a double is rounded to the nearest (as MongoDB
            // does), and a date outside the range is an error there too.
            let overflow = || StoreError::new(StoreErrorKind::Overflow, "date overflow in $add");
            let millis = match n {
                Bson::Double(x) => {
                    let total = d.timestamp_millis() as f64 + x.round();
                    if !total.is_finite() || total.abs() >= 9.223_372_036_854_776e18 {
                        return Err(overflow());
                    }
                    total as i64
                }
                n => d
                    .timestamp_millis()
                    .checked_add(long(n))
                    .ok_or_else(overflow)?,
            };
            Bson::DateTime(bson::DateTime::from_millis(millis))
        }
        (Bson::Decimal128(_), Bson::Double(_) | Bson::DateTime(_))
        | (Bson::Double(_) | Bson::DateTime(_), Bson::Decimal128(_)) => {
            // MongoDB first converts a double to a decimal of 15 significant
            // digits, and adds a date's milliseconds in decimal; this store
            // does neither, and says so rather than answer otherwise.
            return Err(bad_request(format!(
                "the embedded store does not $add a {} and a {}",
                type_name(sum),
                type_name(v)
            )));
        }
        _ => {
            let odd = if matches!(
                sum,
                Bson::Int32(_)
                    | Bson::Int64(_)
                    | Bson::Double(_)
                    | Bson::Decimal128(_)
                    | Bson::DateTime(_)
            ) {
                v
            } else {
                sum
            };
            return Err(bad_request(format!(
                "$add only supports numeric or date types, not {}",
                type_name(odd)
            ))
            .with_code(16554));
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
        Some(d @ Bson::Decimal128(_)) => match Exact::of(d).map(Exact::trunc) {
            Some(Exact::Nan) => {
                return failed(
                    "Attempt to convert NaN value to integer type in $convert with no onError value"
                        .into(),
                )
            }
            Some(Exact::Infinite(_)) => return failed(
                "Attempt to convert infinity value to integer type in $convert with no onError value"
                    .into(),
            ),
            Some(whole) => match whole.as_i64() {
                Some(n) => n,
                None => {
                    return failed(format!(
                        "Conversion would overflow target type in $convert with no onError value: {d}"
                    ))
                }
            },
            None => {
                return failed(format!(
                    "Failed to read the decimal {d} in $convert with no onError value"
                ))
            }
        },
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
