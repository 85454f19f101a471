//! Every example runs to completion: on the embedded store, and on the MongoDB
//! server at `MONGODB_URI` when it is set. The examples check their own results.

use std::path::PathBuf;
use std::process::Command;

const EXAMPLES: [(&str, &str); 8] = [
    ("quickstart", "alice has 700 left"),
    ("payment", "alice paid exactly once: balance 700"),
    ("transfer", "A: balance 900, pendingTransactions []"),
    ("inventory", "kayaks left: 1"),
    ("saga", "slots left on oslo-bergen: 0"),
    ("service", "o-2 is still new"),
    ("crash_recover", "after recovery: A = 900, B = 1100"),
    (
        "metrics",
        r#"tandem_transactions_total{strategy="two_phase",outcome="committed"} 3"#,
    ),
];

/// The example's binary, as `cargo build --examples` leaves it (the project's
/// test script builds the examples first; `cargo test` alone builds them only
/// as test harnesses).
fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let path = deps.parent().unwrap().join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build --examples` first (scripts/test.sh does)",
        path.display()
    );
    path
}

fn run(name: &str, expected: &str, uri: Option<&str>, db: &str) {
    let mut cmd = Command::new(example(name));
    cmd.env_remove("MONGODB_URI").env("TANDEM_DB", db);
    if let Some(uri) = uri {
        cmd.env("MONGODB_URI", uri);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed ({:?}):\n{stdout}\n{}",
        uri.map(|_| "MongoDB").unwrap_or("embedded"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(expected), "{name} printed:\n{stdout}");
}

#[test]
fn every_example_runs_on_the_embedded_store() {
    for (name, expected) in EXAMPLES {
        run(name, expected, None, "tandem_demo");
    }
}

#[test]
fn every_example_runs_on_mongodb() {
    let Some(uri) = tandem::testing::server::mongodb_uri() else {
        return;
    };
    let db = format!("tandem_examples_{}", std::process::id());
    for (name, expected) in EXAMPLES {
        run(name, expected, Some(&uri), &db);
        // Twice: a demo must be repeatable on a database it already used.
        run(name, expected, Some(&uri), &db);
    }
}
