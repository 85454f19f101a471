//! End-to-end runs of the bank test against the server at `MONGODB_URI`:
//! real worker processes, real faults, the real checker.
//!
//! Without `MONGODB_URI` the tests are skipped (they fail instead when
//! `TANDEM_REQUIRE_MONGODB=1`). The one server then holds both of the bank's
//! stores, in two databases. The server-kill nemesis is not used here (the
//! server is not ours to kill), nor are failpoints (`failCommand` is one
//! server-wide setting, which other tests on the same server may be using);
//! `bash scripts/bank.sh` runs every nemesis on two servers of its own.

use std::process::{Command, Output};

fn server() -> Option<String> {
    tandem::testing::server::mongodb_uri()
}

/// Runs the bank test with `args`, its run directory under a directory of test `name`'s own.
fn bank(name: &str, args: &[&str]) -> (Output, String) {
    let work = std::env::temp_dir().join(format!("tandem-bank-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tandem-bank"))
        .args(args)
        .arg("--work-dir")
        .arg(&work)
        .output()
        .expect("running tandem-bank");
    let _ = std::fs::remove_dir_all(&work);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

fn final_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_run_with_killed_and_paused_workers_and_lost_answers_keeps_every_invariant() {
    if server().is_none() {
        return;
    }
    let (out, text) = bank(
        "faults",
        &[
            "--duration",
            "10s",
            "--accounts",
            "6",
            "--workers",
            "3",
            "--seed",
            "11",
            "--nemesis",
            "kill-worker,pause,lose-answer",
            "--nemesis-interval",
            "2s",
        ],
    );
    println!("{text}");
    assert!(out.status.success(), "the run failed:\n{text}");
    let last = final_line(&out);
    let numbers: Vec<u64> = last
        .trim_start_matches("bank: ")
        .split(", ")
        .map(|part| {
            part.split(' ')
                .find_map(|word| word.parse().ok())
                .unwrap_or_else(|| panic!("no number in {part:?} of {last:?}"))
        })
        .collect();
    let [transfers, committed, canceled, faults, violations, peak, _collected] = numbers[..] else {
        panic!("unexpected final line {last:?}");
    };
    assert!(last.contains(" violations, hot document peak "), "{last}");
    assert!(last.ends_with(" records collected"), "{last}");
    assert_eq!(violations, 0);
    assert!(committed > 0 && faults > 0 && peak > 0, "{last}");
    assert!(committed + canceled <= transfers, "{last}");
    assert!(text.contains("nemesis kill-server skipped"), "{text}");
    // The workers reached the server through the answer-losing proxies.
    assert!(
        text.contains("lose-answer: the workers reach server 1 through"),
        "{text}"
    );
}

#[test]
fn money_added_behind_tandems_back_is_caught() {
    if server().is_none() {
        return;
    }
    let (out, text) = bank(
        "sabotage",
        &[
            "--duration",
            "4s",
            "--accounts",
            "4",
            "--workers",
            "2",
            "--seed",
            "12",
            "--nemesis",
            "none",
            "--sabotage",
            // Every record kept, so that the audit runs too.
            "--no-gc",
        ],
    );
    println!("{text}");
    // A failed run keeps its databases for inspection: drop them.
    if let Some(dbs) = text
        .lines()
        .find_map(|l| l.strip_prefix("bank: databases kept: "))
    {
        for db in dbs.split(" and ") {
            drop_database(db);
        }
    }
    assert_eq!(out.status.code(), Some(1), "the run should fail:\n{text}");
    let last = final_line(&out);
    assert!(
        last.contains(", 0 faults, 3 violations, hot document peak ")
            && last.ends_with(", 0 records collected"),
        "conservation, one balance and the audit: {text}"
    );
    assert!(
        text.contains("checks FAILED: conservation 1, balance 1, audit 1"),
        "{text}"
    );
    assert!(text.contains("off by +7"), "{text}");
}

fn drop_database(db: &str) {
    let uri = server().expect("a server");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = mongodb::Client::with_uri_str(&uri).await.unwrap();
        client.database(db).drop().await.unwrap();
    });
}
