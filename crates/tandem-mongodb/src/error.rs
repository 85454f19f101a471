//! Mapping of driver errors into [`StoreError`]s, and credential redaction.

use mongodb::error::{Error as DriverError, ErrorKind, WriteFailure};
use tandem::store::{StoreError, StoreErrorKind};

/// Codes after which the outcome of a command is unknown and repeating it may succeed:
/// network, failover, shutdown and write-conflict errors.
pub const TRANSIENT_CODES: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    112,   // WriteConflict
    189,   // PrimarySteppedDown
    262,   // ExceededTimeLimit
    9001,  // SocketException
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
];

/// Write-concern error codes that mean "not (yet) replicated as asked", on top of
/// [`TRANSIENT_CODES`]: 64 (WriteConcernFailed, a `wtimeout`).
const TRANSIENT_WRITE_CONCERN_CODES: &[i32] = &[64];

/// Error labels that make an error transient.
pub const TRANSIENT_LABELS: &[&str] = &["RetryableWriteError", "TransientTransactionError"];

const DUPLICATE_KEY_CODES: &[i32] = &[11000, 11001, 12582];
const TOO_LARGE_CODES: &[i32] = &[10334, 17419, 17420, 10329, 13548];
const UNAUTHORIZED_CODES: &[i32] = &[13, 18, 8000, 11, 31, 33];
const OVERFLOW_CODES: &[i32] = &[15];
/// 14 (TypeMismatch: `$inc` of a string, or by one) and 28 (PathNotViable:
/// a path running through a scalar), as the embedded store classifies them.
const TYPE_MISMATCH_CODES: &[i32] = &[14, 28];
/// Codes of commands the server refused as malformed.
const BAD_REQUEST_CODES: &[i32] = &[
    2,     // BadValue
    4,     // NoSuchKey
    9,     // FailedToParse
    22,    // InvalidBSON
    40,    // ConflictingUpdateOperators
    52,    // DollarPrefixedFieldName
    53,    // InvalidIdField
    54,    // NotSingleValueField
    55,    // InvalidDBRef
    56,    // EmptyFieldName
    57,    // DottedFieldName
    66,    // ImmutableField
    67,    // CannotCreateIndex
    72,    // InvalidOptions
    73,    // InvalidNamespace
    85,    // IndexOptionsConflict
    86,    // IndexKeySpecsConflict
    197,   // InvalidIndexSpecificationOption
    15975, // a sort direction other than 1 or -1
];

/// What the server or the driver said, before it is classified.
struct Facts {
    code: Option<i32>,
    message: String,
    write_concern_error: bool,
    labels: Vec<String>,
}

fn facts(err: &DriverError) -> Facts {
    let mut labels: Vec<String> = err.labels().iter().cloned().collect();
    // Labels of errors this one wraps count too (the driver wraps a retry's cause).
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        if let Some(driver) = inner.downcast_ref::<DriverError>() {
            labels.extend(driver.labels().iter().cloned());
        }
        source = inner.source();
    }
    labels.sort();
    labels.dedup();
    let (code, message, write_concern_error) = match err.kind.as_ref() {
        ErrorKind::Command(c) => (
            Some(c.code),
            format!("{} ({}): {}", c.code, c.code_name, c.message),
            false,
        ),
        ErrorKind::Write(WriteFailure::WriteError(w)) => (
            Some(w.code),
            match &w.code_name {
                Some(name) => format!("{} ({}): {}", w.code, name, w.message),
                None => format!("{}: {}", w.code, w.message),
            },
            false,
        ),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => (
            Some(w.code),
            format!(
                "write concern error {} ({}): {}",
                w.code, w.code_name, w.message
            ),
            true,
        ),
        other => (None, other.to_string(), false),
    };
    Facts {
        code,
        message,
        write_concern_error,
        labels,
    }
}

/// Classifies a driver error. `secrets` are strings removed from the message
/// (e.g. the password of the URI), on top of any URI userinfo.
pub fn map_driver_error(err: &DriverError, secrets: &[String]) -> StoreError {
    let f = facts(err);
    let kind = classify(err.kind.as_ref(), &f);
    let mut message = redact(&f.message, secrets);
    if !f.labels.is_empty() {
        message.push_str(&format!(" [labels: {}]", f.labels.join(", ")));
    }
    StoreError {
        kind,
        code: f.code,
        message,
    }
}

fn classify(kind: &ErrorKind, f: &Facts) -> StoreErrorKind {
    if f.labels
        .iter()
        .any(|l| TRANSIENT_LABELS.contains(&l.as_str()))
    {
        return StoreErrorKind::Transient;
    }
    match kind {
        ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => {
            return StoreErrorKind::Transient
        }
        ErrorKind::ServerSelection { .. } | ErrorKind::Shutdown | ErrorKind::DnsResolve { .. } => {
            return StoreErrorKind::Unavailable
        }
        ErrorKind::Authentication { .. } => return StoreErrorKind::Unauthorized,
        ErrorKind::InvalidArgument { message, .. } => {
            return if is_too_large_message(message) {
                StoreErrorKind::DocumentTooLarge
            } else {
                StoreErrorKind::BadRequest
            };
        }
        ErrorKind::BsonSerialization(_) | ErrorKind::InvalidTlsConfig { .. } => {
            return StoreErrorKind::BadRequest
        }
        _ => {}
    }
    match f.code {
        Some(code) => classify_code(code, &f.message, f.write_concern_error),
        None => StoreErrorKind::Other,
    }
}

/// Classifies a server error code and message.
pub fn classify_code(code: i32, message: &str, write_concern_error: bool) -> StoreErrorKind {
    if TRANSIENT_CODES.contains(&code)
        || (write_concern_error && TRANSIENT_WRITE_CONCERN_CODES.contains(&code))
    {
        return StoreErrorKind::Transient;
    }
    if write_concern_error {
        // The write itself was applied; only the acknowledgement is off. No
        // definite refusal, whatever the code (an auth code here does not
        // mean the write was refused): the outcome stays unknown.
        return StoreErrorKind::Other;
    }
    if DUPLICATE_KEY_CODES.contains(&code) {
        return StoreErrorKind::DuplicateKey;
    }
    if TOO_LARGE_CODES.contains(&code) || is_too_large_message(message) {
        return StoreErrorKind::DocumentTooLarge;
    }
    if TYPE_MISMATCH_CODES.contains(&code) || is_type_mismatch_message(message) {
        return StoreErrorKind::TypeMismatch;
    }
    if OVERFLOW_CODES.contains(&code) || is_overflow_message(message) {
        return StoreErrorKind::Overflow;
    }
    if UNAUTHORIZED_CODES.contains(&code) {
        return StoreErrorKind::Unauthorized;
    }
    if BAD_REQUEST_CODES.contains(&code) {
        return StoreErrorKind::BadRequest;
    }
    StoreErrorKind::Other
}

fn is_too_large_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("too large")
        || m.contains("larger than 16777216")
        || m.contains("objecttoolarge")
        || (m.contains("must be within") && m.contains("bytes"))
}

fn is_type_mismatch_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    (m.contains("cannot apply $") && m.contains("non-numeric"))
        || (m.contains("cannot apply $") && m.contains("non-array"))
        || m.contains("must be an array but is of type")
}

fn is_overflow_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("overflow") || m.contains("failed to apply $inc operations")
}

/// Removes credentials from `text`: the userinfo of every `scheme://user:pass@host`
/// and every non-empty string of `secrets`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = redact_uri_userinfo(text);
    for secret in secrets {
        if !secret.is_empty() && out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "<redacted>");
        }
    }
    out
}

/// Replaces the userinfo of every URI in `text` (`scheme://userinfo@host`) with `<redacted>`.
pub fn redact_uri_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let (head, tail) = rest.split_at(pos + 3);
        out.push_str(head);
        // The authority ends at the first '/', '?', '#' or whitespace; the
        // userinfo is everything before its last '@'.
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                out.push_str("<redacted>");
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// The strings of a URI that must never appear in a message: its userinfo,
/// user and password, raw and percent-decoded.
pub fn uri_secrets(uri: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let Some(pos) = uri.find("://") else {
        return secrets;
    };
    let tail = &uri[pos + 3..];
    let end = tail.find(['/', '?', '#']).unwrap_or(tail.len());
    let authority = &tail[..end];
    let Some(at) = authority.rfind('@') else {
        return secrets;
    };
    let userinfo = &authority[..at];
    secrets.push(userinfo.to_string());
    if let Some((user, password)) = userinfo.split_once(':') {
        for part in [password, user] {
            // Very short parts would blank out ordinary words; the userinfo
            // itself is still removed.
            if part.len() >= 3 {
                secrets.push(part.to_string());
                let decoded = percent_decode(part);
                if decoded != part {
                    secrets.push(decoded);
                }
            }
        }
    }
    // Longest first, so a password inside the userinfo is not half-replaced.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
            if let Some(b) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified() {
        assert_eq!(
            classify_code(11000, "E11000", false),
            StoreErrorKind::DuplicateKey
        );
        assert_eq!(classify_code(14, "", false), StoreErrorKind::TypeMismatch);
        assert_eq!(
            classify_code(28, "Cannot create field 'b' in element {a: 5}", false),
            StoreErrorKind::TypeMismatch
        );
        assert_eq!(
            classify_code(
                2,
                "Cannot apply $inc to a value of non-numeric type. {_id: 1} has the field 's'",
                false
            ),
            StoreErrorKind::TypeMismatch
        );
        assert_eq!(
            classify_code(2, "Failed to apply $inc operations to current value", false),
            StoreErrorKind::Overflow
        );
        assert_eq!(
            classify_code(10334, "", false),
            StoreErrorKind::DocumentTooLarge
        );
        assert_eq!(
            classify_code(17419, "", false),
            StoreErrorKind::DocumentTooLarge
        );
        assert_eq!(classify_code(18, "", false), StoreErrorKind::Unauthorized);
        assert_eq!(classify_code(13, "", false), StoreErrorKind::Unauthorized);
        for code in TRANSIENT_CODES {
            assert_eq!(classify_code(*code, "", false), StoreErrorKind::Transient);
            assert_eq!(classify_code(*code, "", true), StoreErrorKind::Transient);
        }
        assert_eq!(classify_code(64, "", true), StoreErrorKind::Transient);
        assert_eq!(classify_code(100, "", true), StoreErrorKind::Other);
        // A write concern error follows a write that was applied: never a
        // definite refusal, auth codes included.
        for code in [13, 18, 11, 31, 33, 8000, 2, 11000, 10334] {
            let kind = classify_code(code, "", true);
            assert!(kind.outcome_unknown(), "WCE {code}: {kind:?}");
        }
        assert_eq!(
            classify_code(2, "BadValue", false),
            StoreErrorKind::BadRequest
        );
        assert_eq!(
            classify_code(15975, "$sort key ordering must be 1", false),
            StoreErrorKind::BadRequest
        );
        assert_eq!(classify_code(12345, "", false), StoreErrorKind::Other);
    }

    #[test]
    fn userinfo_is_redacted() {
        assert_eq!(
            redact_uri_userinfo("bad uri mongodb://alice:s3cret@host:1/db?x=1 here"),
            "bad uri mongodb://<redacted>@host:1/db?x=1 here"
        );
        assert_eq!(
            redact_uri_userinfo("mongodb://host:1/"),
            "mongodb://host:1/"
        );
        assert_eq!(
            redact_uri_userinfo("a mongodb+srv://u:p@x@y, mongodb://h"),
            "a mongodb+srv://<redacted>@y, mongodb://h"
        );
        assert_eq!(redact_uri_userinfo("no uri"), "no uri");
    }

    #[test]
    fn secrets_are_removed() {
        let secrets = uri_secrets("mongodb://alice:p%40ss@host/");
        assert!(secrets.contains(&"p%40ss".to_string()));
        assert!(secrets.contains(&"p@ss".to_string()));
        assert!(secrets.contains(&"alice:p%40ss".to_string()));
        let text = redact("password p@ss and alice:p%40ss", &secrets);
        assert!(!text.contains("p@ss") && !text.contains("p%40ss"), "{text}");
        assert!(uri_secrets("mongodb://host/").is_empty());
    }
}
