//! Crash and recover: a worker dies in the middle of a transaction; a restart
//! plus recovery finishes it.
//!
//! With `MONGODB_URI` set, the worker is a real child process, killed with
//! SIGKILL while it holds a half-applied transfer. On the embedded store, which
//! lives inside one process, the worker is a task aborted at the same point.
//!
//! ```sh
//! cargo run --example crash_recover
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
// A crash on cue comes from tandem's testing kit (feature `test-util`).
use tandem::testing::FaultStore;
use tandem::{
    participant, Coordinator, Namespace, ParticipantDocument, PendingPolicy, RecoveryConfig, Store,
    Transaction, TxId, TxState,
};

#[participant(collection = "accounts")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    name: String,
    balance: i64,
}

fn transfer(id: &TxId, amount: i64) -> Transaction {
    Transaction::with_id(id.as_str())
        .change(
            Account::change("A")
                .inc_balance(-amount)
                .require_balance_gte(amount),
        )
        .change(Account::change("B").inc_balance(amount))
}

/// The lease of the worker: short, so that the demo does not wait long for it.
const LEASE: Duration = Duration::from_millis(500);

/// The worker: runs the transfer and stalls for good after applying both
/// participants (store operations: write its lease, as a coordinator's
/// first transaction under a caller-chosen id does, write the record,
/// apply A, apply B), just before the commit, calling `stalled` then.
async fn worker(store: Arc<dyn Store>, db: &str, id: &TxId, stalled: impl FnOnce()) {
    let faulty = FaultStore::new(store);
    let pause = faulty.pause_at(5);
    let coordinator = Coordinator::builder(faulty)
        .database(db)
        .lease(LEASE)
        .build();
    let tx = transfer(id, 100);
    let run = tokio::spawn(async move { coordinator.run(tx).await });
    let _ = pause.reached.await;
    stalled();
    std::mem::forget(pause.release); // never continue: the worker is about to die
    let _ = run.await;
}

async fn balances(store: &dyn Store, db: &str) -> Result<(i64, i64), Box<dyn std::error::Error>> {
    let ns = Namespace::new(db, Account::COLLECTION);
    let get = |name: &'static str| {
        let ns = ns.clone();
        async move {
            let d = store
                .find_one(&ns, bson::doc! { "_id": name })
                .await?
                .ok_or("no account")?;
            Ok::<i64, Box<dyn std::error::Error>>(d.get_i64("balance")?)
        }
    };
    Ok((get("A").await?, get("B").await?))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The embedded store, or the MongoDB server at MONGODB_URI.
    let store = tandem_mongodb::store_from_env().await?;
    let db = std::env::var("TANDEM_DB").unwrap_or_else(|_| "tandem_demo".to_owned());
    let args: Vec<String> = std::env::args().collect();
    if let [_, role, id] = args.as_slice() {
        if role == "worker" {
            let id = TxId::new(id.clone())?;
            worker(store, &db, &id, || {
                println!("worker: transaction {id} is half applied; waiting to be killed");
            })
            .await;
            return Ok(());
        }
    }
    println!(
        "crash-and-recover demo on the {} store, database {db}",
        store.name()
    );
    // The accounts as they were, written outside any transaction.
    let setup = Coordinator::builder_shared(store.clone())
        .database(&db)
        .build();
    for name in ["A", "B"] {
        let start = Account {
            name: name.into(),
            balance: 1000,
        };
        Account::put(&setup, &start).await?;
    }
    let id = TxId::generate();

    if std::env::var("MONGODB_URI").is_ok_and(|u| !u.is_empty()) {
        // ANCHOR: kill
        let mut child = Command::new(std::env::current_exe()?)
            .args(["worker", id.as_str()])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
        print!("{line}");
        child.kill()?; // SIGKILL
        child.wait()?;
        println!("parent: worker killed");
        // ANCHOR_END: kill
    } else {
        let (stalled_tx, stalled_rx) = tokio::sync::oneshot::channel();
        let (store, db, id) = (store.clone(), db.clone(), id.clone());
        let shown = id.clone();
        let task = tokio::spawn(async move {
            worker(store, &db, &id, move || {
                println!("worker: transaction {shown} is half applied");
                let _ = stalled_tx.send(());
            })
            .await
        });
        stalled_rx.await?;
        task.abort();
        println!("parent: worker aborted");
    }
    let (a, b) = balances(store.as_ref(), &db).await?;
    let landed = if a == 900 {
        "A's debit landed before the crash"
    } else {
        "the debit was still in flight"
    };
    println!(
        "waiting for the worker's lease ({LEASE:?}) and the clock margin ({:?})",
        tandem::CoordinatorConfig::default().clock_margin
    );
    println!("after the crash: A = {a}, B = {b} ({landed}; B's credit waits for the commit)");

    // ANCHOR: recover
    let restarted = Coordinator::builder_shared(store.clone())
        .database(&db)
        .build();
    // The dead worker's last steps could still be on their way until its lease
    // and the clock margin have run out, by the store's clock: recovery waits.
    let recovery = restarted.recovery(RecoveryConfig {
        pending: PendingPolicy::RollForward,
        ..RecoveryConfig::default()
    });
    let report = loop {
        let report = recovery.run_once().await?;
        if report.claimed > 0 {
            break report;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!(
        "recovery: claimed {}, committed {}",
        report.claimed, report.committed
    );
    // ANCHOR_END: recover
    let (a, b) = balances(store.as_ref(), &db).await?;
    let state = restarted.record(&id).await?.map(|r| r.state);
    println!("after recovery: A = {a}, B = {b}, transaction {id} is {state:?}");
    assert_eq!((a, b), (900, 1100));
    assert_eq!(state, Some(TxState::Done));
    // Background work finished, connections closed, before `main` returns.
    restarted.shutdown().await;
    Ok(())
}
