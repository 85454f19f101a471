//! Validation: everything that can be wrong with a filter regardless of data.

use bson::{Bson, Document};

use super::expr::NOW;
use super::{bad_request, is_operator_doc};
use crate::store::StoreError;

/// Checks that `filter` only uses the supported operators, with well-formed
/// arguments. [`matches()`](super::matches()) calls it; [`eval`](super::eval())
/// assumes it passed.
pub(crate) fn validate(filter: &Document) -> Result<(), StoreError> {
    validate_filter(filter, true)
}

/// [`validate`] for the filter of a `$pull` condition, where MongoDB does not
/// allow `$expr`.
pub(crate) fn validate_pull_filter(filter: &Document) -> Result<(), StoreError> {
    validate_filter(filter, false)
}

fn validate_filter(filter: &Document, allow_expr: bool) -> Result<(), StoreError> {
    for (key, value) in filter {
        if let Some(op) = key.strip_prefix('$') {
            match op {
                "expr" if allow_expr => validate_expr(value)?,
                "expr" => return Err(bad_request("$expr is not allowed in this context")),
                "and" | "or" | "nor" => {
                    let members = match value {
                        Bson::Array(members) if !members.is_empty() => members,
                        _ => return Err(bad_request(format!("{key} must be a nonempty array"))),
                    };
                    for member in members {
                        match member {
                            Bson::Document(member) => validate_filter(member, allow_expr)?,
                            _ => {
                                return Err(bad_request(format!(
                                    "{key} entries need to be full objects"
                                )))
                            }
                        }
                    }
                }
                _ => return Err(bad_request(format!("unknown top level operator: {key}"))),
            }
        } else {
            validate_condition(key, value)?;
        }
    }
    Ok(())
}

/// Validates the condition on one field: an operator document or a value.
fn validate_condition(path: &str, cond: &Bson) -> Result<(), StoreError> {
    if path.is_empty() || path.starts_with('.') || path.ends_with('.') || path.contains("..") {
        return Err(bad_request(format!(
            "invalid field path in filter: '{path}'"
        )));
    }
    match cond {
        Bson::Document(ops) if is_operator_doc(ops) => validate_operators(ops),
        Bson::RegularExpression(_) => Err(unsupported_regex(path)),
        _ => Ok(()),
    }
}

/// Validates an operator document such as `{$gt: 1, $lt: 5}`.
pub(crate) fn validate_operators(ops: &Document) -> Result<(), StoreError> {
    for (op, arg) in ops {
        match op.as_str() {
            "$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte" | "$exists" => {}
            "$type" => {
                let names = match arg {
                    Bson::Array(names) => names.as_slice(),
                    one => std::slice::from_ref(one),
                };
                for name in names {
                    match name {
                        Bson::String(name) if super::eval::is_type_name(name) => {}
                        other => {
                            return Err(bad_request(format!(
                                "$type needs a type's name (such as \"string\"), not {other}"
                            )))
                        }
                    }
                }
            }
            "$not" => match arg {
                Bson::Document(inner) if is_operator_doc(inner) => validate_operators(inner)?,
                Bson::RegularExpression(_) => return Err(unsupported_regex(op)),
                _ => return Err(bad_request("$not needs an operator document")),
            },
            "$in" | "$nin" => match arg {
                Bson::Array(values) => {
                    if values
                        .iter()
                        .any(|v| matches!(v, Bson::RegularExpression(_)))
                    {
                        return Err(unsupported_regex(op));
                    }
                }
                _ => return Err(bad_request(format!("{op} needs an array"))),
            },
            _ => return Err(bad_request(format!("unknown operator: {op}"))),
        }
    }
    Ok(())
}

/// Validates the expression of an `$expr` (see the module documentation for
/// the supported subset).
fn validate_expr(expr: &Bson) -> Result<(), StoreError> {
    validate_expr_in(expr, &[])
}

/// [`validate_expr`] inside `$let`s binding the variables `bound`.
fn validate_expr_in(expr: &Bson, bound: &[&str]) -> Result<(), StoreError> {
    match expr {
        Bson::String(s) if s.starts_with("$$") => {
            let name = s[2..].split('.').next().unwrap_or("");
            if s == NOW || name == "ROOT" || bound.contains(&name) {
                Ok(())
            } else {
                Err(bad_request(format!(
                    "unsupported variable in $expr: {s} (only $$NOW, $$ROOT and those of an enclosing $let are supported)"
                )))
            }
        }
        Bson::String(s) if s.starts_with('$') => {
            // No segment empty or starting with `$`, checked byte by byte.
            let mut segment_start = true;
            let mut invalid = false;
            for &b in &s.as_bytes()[1..] {
                invalid |= segment_start && (b == b'.' || b == b'$');
                segment_start = b == b'.';
            }
            if invalid || segment_start {
                return Err(bad_request(format!("invalid field path in $expr: '{s}'")));
            }
            Ok(())
        }
        Bson::Document(d) => {
            let Some((op, args)) = d.iter().next().filter(|(op, _)| op.starts_with('$')) else {
                return Err(bad_request(format!(
                    "object expressions are not supported in $expr: {d}"
                )));
            };
            if d.len() > 1 {
                return Err(bad_request(format!(
                    "an expression specification must contain exactly one field, \
                     the name of the expression. Found {} fields in {d}",
                    d.len()
                )));
            }
            if op == "$literal" {
                return Ok(());
            }
            if op == "$let" {
                return validate_let(args, bound);
            }
            let args = expr_args(args);
            let arity = |n: usize| {
                if args.len() == n {
                    Ok(())
                } else {
                    Err(bad_request(format!(
                        "Expression {op} takes exactly {n} arguments. {} were passed in.",
                        args.len()
                    )))
                }
            };
            match op.as_str() {
                "$lt" | "$lte" | "$gt" | "$gte" | "$eq" | "$ne" | "$subtract" | "$ifNull" => {
                    arity(2)?
                }
                "$toLong" | "$isArray" | "$isNumber" | "$bsonSize" | "$type" => arity(1)?,
                "$arrayElemAt" => arity(2)?,
                "$cond" => arity(3)?,
                "$and" | "$or" | "$add" => {}
                _ => {
                    return Err(bad_request(format!(
                        "unsupported expression operator in $expr: {op}"
                    )))
                }
            }
            args.iter().try_for_each(|a| validate_expr_in(a, bound))
        }
        Bson::Array(_) => Err(bad_request(format!(
            "array expressions are not supported in $expr: {expr}"
        ))),
        _ => Ok(()),
    }
}

/// `$let: {vars: {name: expr, ...}, in: expr}`: the variables' expressions
/// see the enclosing scope, `in` sees them too.
fn validate_let(spec: &Bson, bound: &[&str]) -> Result<(), StoreError> {
    let Bson::Document(spec) = spec else {
        return Err(bad_request("$let only supports an object as its argument"));
    };
    let (Ok(vars), Some(body)) = (spec.get_document("vars"), spec.get("in")) else {
        return Err(bad_request("$let needs 'vars' and 'in'"));
    };
    if spec.len() != 2 {
        return Err(bad_request("$let takes only 'vars' and 'in'"));
    }
    let mut inner = bound.to_vec();
    for (name, expr) in vars {
        let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(bad_request(format!(
                "'{name}' is not a valid variable name"
            )));
        }
        validate_expr_in(expr, bound)?;
        inner.push(name);
    }
    validate_expr_in(body, &inner)
}

/// The operands of an expression operator: the elements of an array, or
/// the one value given without one (`{$toLong: "$$NOW"}`).
pub(super) fn expr_args(args: &Bson) -> &[Bson] {
    match args {
        Bson::Array(a) => a,
        one => std::slice::from_ref(one),
    }
}

fn unsupported_regex(at: &str) -> StoreError {
    bad_request(format!(
        "unknown operator: $regex (regular expressions in '{at}' are not supported)"
    ))
}
