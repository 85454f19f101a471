//! The test server of a test run: where it is, whether it is required, and
//! names no other test uses. One copy for every test of the workspace (and
//! for tests of your own that take the same variables).
//!
//! * `MONGODB_URI`: the server to run the MongoDB half of a test against.
//!   `bash scripts/test.sh` starts one and sets it; point it at a MongoDB of
//!   your own to run the same tests there.
//! * `TANDEM_REQUIRE_MONGODB=1`: a missing `MONGODB_URI` fails the test
//!   instead of skipping its MongoDB half (the test command sets it, so that
//!   a server that failed to start cannot make the suite pass by skipping).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The variable naming the server.
pub const URI_VARIABLE: &str = "MONGODB_URI";

/// The variable that makes a missing server a failure.
pub const REQUIRE_VARIABLE: &str = "TANDEM_REQUIRE_MONGODB";

/// Whether `TANDEM_REQUIRE_MONGODB=1`: a missing server is then a failure, not a skip.
pub fn mongodb_required() -> bool {
    std::env::var(REQUIRE_VARIABLE).as_deref() == Ok("1")
}

/// The URI of the test server, from `MONGODB_URI`.
///
/// `None` (after printing `skipped: MONGODB_URI not set`) when it is unset or
/// blank, unless [`mongodb_required`], in which case this panics.
pub fn mongodb_uri() -> Option<String> {
    match std::env::var(URI_VARIABLE) {
        Ok(uri) if !uri.trim().is_empty() => Some(uri),
        _ => {
            assert!(
                !mongodb_required(),
                "MONGODB_URI is not set but TANDEM_REQUIRE_MONGODB=1 requires a server"
            );
            println!("skipped: MONGODB_URI not set");
            None
        }
    }
}

/// A database (or collection) name no other test uses: `tandem_test_`, the
/// first 24 characters of `prefix`, the process id, a counter and the time.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let prefix: String = prefix.chars().take(24).collect();
    format!(
        "tandem_test_{prefix}_{}_{}_{nanos:x}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_differ_and_fit_a_database_name() {
        let a = unique_name("a-rather-long-prefix-for-a-database-name");
        let b = unique_name("a-rather-long-prefix-for-a-database-name");
        assert_ne!(a, b);
        // MongoDB allows database names of up to 63 bytes.
        assert!(a.len() <= 63, "{a} is {} bytes", a.len());
    }
}
