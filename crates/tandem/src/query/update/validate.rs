//! Validation of an update as a whole, before it touches the document, and
//! of replacement documents.

use bson::{Bson, Document};

use super::{
    BAD_VALUE, CONFLICTING_UPDATE, DOLLAR_PREFIXED_FIELD_NAME, EMPTY_FIELD_NAME, FAILED_TO_PARSE,
    IMMUTABLE_FIELD, TYPE_MISMATCH,
};
use crate::query::{self, is_operator_doc, type_name};
use crate::store::{StoreError, StoreErrorKind};

/// Checks a replacement document (for `replaceOne`): it must not contain
/// update operators, i.e. no top-level key may start with `$`.
///
/// (Run as the unit test `query::doc_examples::validate_replacement`: the module is internal.)
/// ```ignore
/// use bson::doc;
/// use tandem::query::update::validate_replacement;
///
/// assert!(validate_replacement(&doc! { "state": "done" }).is_ok());
/// assert!(validate_replacement(&doc! { "$set": { "state": "done" } }).is_err());
/// ```
pub fn validate_replacement(doc: &Document) -> Result<(), StoreError> {
    match doc.keys().find(|k| k.starts_with('$')) {
        None => Ok(()),
        Some(key) => Err(StoreError::new(
            StoreErrorKind::BadRequest,
            format!(
                "The dollar ($) prefixed field '{key}' in '{key}' is not allowed in a replacement document"
            ),
        )
        .with_code(DOLLAR_PREFIXED_FIELD_NAME)),
    }
}

/// Checks an update document without applying it: the checks
/// [`apply_update`](super::apply_update) makes before touching the document.
pub(crate) fn check_update(update: &Document) -> Result<(), StoreError> {
    validate_update(update).map(|_| ())
}

/// [`check_update`], answering whether any path of the update touches `_id`.
pub(crate) fn check_update_touching_id(update: &Document) -> Result<bool, StoreError> {
    validate_update(update)
}

pub(super) fn bad_request(code: i32, message: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::BadRequest, message).with_code(code)
}

pub(super) fn immutable_id(message: impl Into<String>) -> StoreError {
    bad_request(IMMUTABLE_FIELD, message)
}

pub(super) fn type_mismatch(code: i32, message: impl Into<String>) -> StoreError {
    StoreError::new(StoreErrorKind::TypeMismatch, message).with_code(code)
}

/// Checks operators, their arguments and their paths; returns whether any
/// path touches `_id`.
pub(super) fn validate_update(update: &Document) -> Result<bool, StoreError> {
    if update.is_empty() {
        return Err(bad_request(
            FAILED_TO_PARSE,
            "Update document requires atomic operators",
        ));
    }
    for (op, spec) in update {
        if !op.starts_with('$') {
            return Err(bad_request(
                FAILED_TO_PARSE,
                format!("Update document requires atomic operators, found field '{op}'"),
            ));
        }
        if !matches!(
            op.as_str(),
            "$set"
                | "$unset"
                | "$inc"
                | "$max"
                | "$push"
                | "$addToSet"
                | "$pull"
                | "$currentDate"
                | "$setOnInsert"
        ) {
            return Err(bad_request(
                FAILED_TO_PARSE,
                format!("Unknown modifier: {op}. Expected a valid update modifier"),
            ));
        }
        let Bson::Document(spec) = spec else {
            return Err(bad_request(
                FAILED_TO_PARSE,
                format!(
                    "Modifiers operate on fields but we found type {} instead. For example: {{$mod: {{<field>: ...}}}} not {{{op}: {spec}}}",
                    type_name(spec)
                ),
            ));
        };
        for (path, value) in spec {
            valid_path(path)?;
            validate_argument(op, path, value)?;
        }
    }
    // Every pair of paths, across operators. Updates are small: the paths
    // live on the stack unless there are many.
    let mut inline = [""; 8];
    let mut count = 0;
    let mut spilled: Vec<&str> = Vec::new();
    for path in update
        .values()
        .filter_map(Bson::as_document)
        .flat_map(Document::keys)
    {
        if count < inline.len() {
            inline[count] = path;
            count += 1;
        } else {
            if spilled.is_empty() {
                spilled.extend_from_slice(&inline);
            }
            spilled.push(path);
        }
    }
    let paths: &[&str] = if spilled.is_empty() {
        &inline[..count]
    } else {
        &spilled
    };
    let mut touches_id = false;
    for (i, a) in paths.iter().enumerate() {
        touches_id |= *a == "_id" || a.starts_with("_id.");
        for b in &paths[i + 1..] {
            let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
            if long.starts_with(short)
                && (long.len() == short.len() || long.as_bytes()[short.len()] == b'.')
            {
                return Err(bad_request(
                    CONFLICTING_UPDATE,
                    format!("Updating the path '{long}' would create a conflict at '{short}'"),
                ));
            }
        }
    }
    Ok(touches_id)
}

pub(super) fn valid_path(path: &str) -> Result<(), StoreError> {
    if path.is_empty() {
        return Err(bad_request(
            EMPTY_FIELD_NAME,
            "An empty update path is not valid.",
        ));
    }
    let bytes = path.as_bytes();
    let mut segment_start = true;
    for (at, &b) in bytes.iter().enumerate() {
        match b {
            // Past the first segment: the document's own fields are never
            // an array's elements (`007` is a field).
            b'0' if segment_start && at > 0 && leading_zero_number(&bytes[at..]) => {
                return Err(bad_request(
                    BAD_VALUE,
                    format!(
                        "The update path '{path}' has a number with a leading zero as a \
                         segment, which MongoDB's updates read as an array index and its \
                         queries as a field name: not supported"
                    ),
                ))
            }
            b'.' if segment_start => {
                return Err(bad_request(
                    EMPTY_FIELD_NAME,
                    format!("The update path '{path}' contains an empty field name, which is not allowed."),
                ))
            }
            b'$' if segment_start => {
                return Err(bad_request(
                    BAD_VALUE,
                    format!("The update path '{path}' uses a positional or '$'-prefixed field, which is not supported"),
                ))
            }
            _ => {}
        }
        segment_start = b == b'.';
    }
    if segment_start {
        return Err(bad_request(
            EMPTY_FIELD_NAME,
            format!("The update path '{path}' contains an empty field name, which is not allowed."),
        ));
    }
    Ok(())
}

/// Whether the segment at the start of `rest` is a number of two or more
/// digits starting with `0` (such as `01`).
pub(crate) fn leading_zero_number(rest: &[u8]) -> bool {
    let segment = rest.split(|&b| b == b'.').next().unwrap_or_default();
    segment.len() > 1 && segment[0] == b'0' && segment.iter().all(u8::is_ascii_digit)
}

fn validate_argument(op: &str, path: &str, value: &Bson) -> Result<(), StoreError> {
    match op {
        "$inc" => match value {
            Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => Ok(()),
            // MongoDB refuses it with code 14, TypeMismatch, whether or not a
            // document matches; MongoStore classifies code 14 as TypeMismatch.
            _ => Err(type_mismatch(
                TYPE_MISMATCH,
                format!("Cannot increment with non-numeric argument: {{{path}: {value}}}"),
            )),
        },
        "$push" | "$addToSet" => match value {
            Bson::Document(d) if is_operator_doc(d) => {
                for (modifier, arg) in d {
                    match (modifier.as_str(), arg) {
                        ("$each", Bson::Array(_)) => {}
                        ("$slice", Bson::Int32(_) | Bson::Int64(_)) if op == "$push" => {}
                        ("$each", _) => {
                            return Err(bad_request(
                                BAD_VALUE,
                                format!(
                                    "The argument to $each in {op} must be an array but it was of type: {}",
                                    type_name(arg)
                                ),
                            ))
                        }
                        _ => {
                            return Err(bad_request(
                                BAD_VALUE,
                                format!("{op} modifier {modifier} on '{path}' is not supported"),
                            ))
                        }
                    }
                }
                if d.contains_key("$each") {
                    Ok(())
                } else {
                    Err(bad_request(BAD_VALUE, format!("{op} on '{path}' is missing $each")))
                }
            }
            _ => Ok(()),
        },
        "$pull" => match value {
            Bson::Document(d) if is_operator_doc(d) => query::validate_operators(d),
            Bson::Document(d) => query::validate_pull_filter(d),
            Bson::RegularExpression(_) => Err(bad_request(
                BAD_VALUE,
                format!("$pull with a regular expression on '{path}' is not supported"),
            )),
            _ => Ok(()),
        },
        "$currentDate" => match value {
            Bson::Boolean(_) => Ok(()),
            Bson::Document(d)
                if d.len() == 1
                    && matches!(d.get("$type"), Some(Bson::String(t)) if t == "date" || t == "timestamp") =>
            {
                Ok(())
            }
            _ => Err(bad_request(
                BAD_VALUE,
                format!(
                    "{} is not valid type for $currentDate. Please use a boolean ('true') or a $type expression ({{$type: 'timestamp/date'}}).",
                    type_name(value)
                ),
            )),
        },
        _ => Ok(()),
    }
}
