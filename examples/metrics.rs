//! tandem's metrics in a Prometheus exporter: a few transfers (one refused by
//! its guard) and a recovery pass, then the text a Prometheus scrape would read.
//!
//! Needs tandem's `metrics` feature; the exporter is the
//! `metrics-exporter-prometheus` crate. Runs on the embedded store; set
//! `MONGODB_URI` to run it on a MongoDB server.
//!
//! ```sh
//! cargo run --example metrics
//! ```

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use serde::{Deserialize, Serialize};
use tandem::{
    participant, CommitPoint, Coordinator, RecoveryConfig, Strategy, Transaction, TxError,
};

#[participant(collection = "accounts")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id")]
    name: String,
    balance: i64,
}

fn transfer(from: &str, to: &str, amount: i64) -> Transaction {
    Transaction::new()
        .change(
            Account::change(from)
                .inc_balance(-amount)
                .require_balance_gte(amount),
        )
        .change(Account::change(to).inc_balance(amount))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: install
    // Before the coordinator runs anything: the facade records into the
    // recorder installed at the time. Buckets make the two histograms
    // Prometheus histograms (without them the exporter renders summaries).
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(tandem::metrics::TRANSACTION_DURATION_SECONDS.into()),
            &[0.001, 0.005, 0.025, 0.1, 0.5, 2.5],
        )?
        .set_buckets_for_metric(
            Matcher::Full(tandem::metrics::ROUND_TRIPS.into()),
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0],
        )?
        .install_recorder()?;
    tandem::metrics::describe();
    // ANCHOR_END: install

    // The embedded store, or the MongoDB server at MONGODB_URI.
    let store = tandem_mongodb::store_from_env().await?;
    let db = std::env::var("TANDEM_DB").unwrap_or_else(|_| "tandem_demo".to_owned());
    println!("metrics demo on the {} store, database {db}", store.name());

    let coordinator = Coordinator::builder_shared(store)
        .database(&db)
        .strategy(Strategy::TwoPhase)
        .commit_point(CommitPoint::Done)
        .build();
    coordinator.ensure_indexes().await?;
    for name in ["A", "B"] {
        let start = Account {
            name: name.into(),
            balance: 1000,
        };
        Account::put(&coordinator, &start).await?;
    }
    for _ in 0..3 {
        coordinator.run(transfer("A", "B", 100)).await?;
    }
    match coordinator.run(transfer("A", "B", 10_000)).await {
        Err(TxError::Canceled { .. }) => println!("the transfer of 10000 was refused"),
        other => return Err(format!("expected a refusal, got {other:?}").into()),
    }
    // A pass finds nothing stuck: the gauge reads 0.
    coordinator
        .recovery(RecoveryConfig::default())
        .run_once()
        .await?;
    coordinator.shutdown().await;

    // ANCHOR: render
    // What a scrape of `/metrics` returns. `PrometheusBuilder::with_http_listener`
    // (the exporter's default `http-listener` feature) serves it instead.
    let text = handle.render();
    // ANCHOR_END: render
    // Durations vary from run to run: show their count, not their buckets.
    for line in text.lines().filter(|l| {
        !l.starts_with("tandem_transaction_duration_seconds_bucket")
            && !l.starts_with("tandem_transaction_duration_seconds_sum")
    }) {
        println!("{line}");
    }
    Ok(())
}
