//! `tandem`: inspect and repair two-phase transactions in a MongoDB database.
//!
//! ```text
//! tandem --uri mongodb://127.0.0.1:27017 status
//! tandem --uri ... status --watch 2s
//! tandem --uri ... list --state pending --older-than 5m --json
//! tandem --uri ... show 6571f0c2a1b2c3d4e5f60718
//! tandem --uri ... explain 6571f0c2a1b2c3d4e5f60718 [--mermaid]
//! tandem --uri ... recover
//! tandem --uri ... cancel 6571f0c2a1b2c3d4e5f60718 --reason "operator"
//! tandem --uri ... gc --older-than 7d
//! ```
//!
//! Exit codes: 0 success; 1 the command ran but could not finish everything
//! (e.g. recovery left transactions for a later pass); 2 bad arguments (e.g.
//! a garbage-collection age below the lease plus the clock margin);
//! 3 the database cannot be reached, the URI is invalid, or authentication
//! failed; 4 no transaction has that id; 5 the request was refused (e.g.
//! cancelling a transaction past its commit point); 6 the records collection
//! does not exist (wrong `--db` or `--collection`: the message names the
//! databases that hold one).
//!
//! Global flags (`--uri`, `--db`, `--lease`, ...) may come before or after
//! the subcommand.

mod duration;
mod output;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bson::doc;
use clap::{Parser, Subcommand};
use tandem::store::FindOptions;
use tandem::{
    Coordinator, Namespace, PendingPolicy, RecoveryConfig, Store, StoreError, StoreErrorKind,
    TxError, TxRecord, TxState,
};
use tandem_mongodb::MongoStore;

/// Inspect, recover, cancel and clean up tandem transactions.
#[derive(Debug, Parser)]
#[command(name = "tandem", version, about)]
struct Cli {
    /// The MongoDB connection string.
    #[arg(long, env = "MONGODB_URI", global = true)]
    uri: Option<String>,
    /// A named store the applications' coordinators register
    /// (`CoordinatorBuilder::store`), as `NAME=URI`; repeat for each. Without
    /// it, `recover`, `cancel` and `gc` cannot drive or tidy a participant in
    /// that store, and `show` does not read its document.
    #[arg(long = "store", value_name = "NAME=URI", global = true)]
    stores: Vec<String>,
    /// The database of the transaction records: the database the
    /// applications' coordinators were given (`CoordinatorBuilder::database`).
    #[arg(long, default_value = "tandem", env = "TANDEM_DB", global = true)]
    db: String,
    /// The collection of the transaction records.
    #[arg(long, default_value = "transactions", global = true)]
    collection: String,
    /// How long to wait for the server before giving up.
    #[arg(long, default_value = "10s", value_parser = duration::parse, global = true)]
    connect_timeout: Duration,
    /// The lease recovery gives the transactions it takes over (use the
    /// applications' lease); garbage collection keeps records at least this
    /// long plus the clock margin.
    #[arg(long, default_value = "30s", value_parser = duration::positive, global = true)]
    lease: Duration,
    /// How far a store's clock may step back (use the applications' margin).
    #[arg(long, default_value = "2s", value_parser = duration::parse, global = true)]
    clock_margin: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Counts per state and the age of the oldest transaction in flight.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Print the counts again every this long (e.g. 2s), until interrupted
        /// or `--times` prints.
        #[arg(long, value_parser = duration::positive)]
        watch: Option<Duration>,
        /// With `--watch`: stop after this many prints.
        #[arg(long, requires = "watch")]
        times: Option<u64>,
    },
    /// Lists transactions, oldest change first.
    List {
        /// Only this state (initial, pending, applied, done, canceling, canceled).
        #[arg(long)]
        state: Option<TxState>,
        /// Only transactions unchanged for at least this long (e.g. 5m).
        #[arg(long, value_parser = duration::parse)]
        older_than: Option<Duration>,
        /// Only transactions owned by this worker.
        #[arg(long)]
        owner: Option<String>,
        /// Only transactions in flight that recovery claimed at least this
        /// many times without finishing them (e.g. a participant's store is
        /// down); each claim after the first doubles their lease, up to eight times the lease.
        #[arg(long, value_name = "CLAIMS")]
        stuck: Option<i32>,
        /// The most rows (at least 1).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..))]
        limit: i64,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Shows one transaction: its record, participants, before-images and history.
    Show {
        /// The transaction id.
        id: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The plan of a recorded transaction: per participant its guards, apply,
    /// commit and derived undo (`--mermaid`: its state diagram instead).
    Explain {
        /// The transaction id.
        id: String,
        /// Print the state diagram in Mermaid.
        #[arg(long)]
        mermaid: bool,
    },
    /// Runs recovery passes until no expired transaction is left.
    Recover {
        /// Roll stuck `pending` transactions forward instead of back.
        #[arg(long)]
        forward: bool,
        /// Transactions claimed per pass (at least 1).
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
        batch: u64,
    },
    /// Cancels a `pending` transaction (its owner is fenced off).
    Cancel {
        /// The transaction id.
        id: String,
        /// Why, recorded as the transaction's last error.
        #[arg(long, default_value = "canceled by an operator")]
        reason: String,
    },
    /// Removes `done` and `canceled` records older than an age (at least the
    /// lease plus the clock margin).
    Gc {
        /// The age (e.g. 7d).
        #[arg(long, value_parser = duration::parse)]
        older_than: Duration,
        /// How long after it finished a transaction with a caller-chosen id
        /// keeps a stub of its id and outcome, so that a retry is refused,
        /// at the least: a record that keeps its coordinator's longer
        /// window keeps that one.
        #[arg(long, default_value = "24h", value_parser = duration::parse)]
        idempotency_window: Duration,
    },
}

/// Why the command failed, and its exit code.
#[derive(Debug)]
enum Failure {
    Usage(String),
    Connect(String),
    NotFound(String),
    Refused(String),
    Incomplete(String),
    NoRecords(String),
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Incomplete(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Connect(_) => 3,
            Failure::NotFound(_) => 4,
            Failure::Refused(_) => 5,
            Failure::NoRecords(_) => 6,
        }
    }

    fn message(&self) -> &str {
        match self {
            Failure::Usage(m)
            | Failure::Connect(m)
            | Failure::NotFound(m)
            | Failure::Refused(m)
            | Failure::Incomplete(m)
            | Failure::NoRecords(m) => m,
        }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        match e.kind {
            StoreErrorKind::Unavailable
            | StoreErrorKind::Unauthorized
            | StoreErrorKind::Unsupported
            | StoreErrorKind::BadRequest => Failure::Connect(e.message),
            _ => Failure::Incomplete(e.message),
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("tandem: {}", f.message());
            ExitCode::from(f.code())
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    if let Command::Gc { older_than, .. } = &cli.command {
        let least = cli.lease.saturating_add(cli.clock_margin);
        if *older_than < least {
            return Err(Failure::Usage(format!(
                "--older-than {} is below the lease plus the clock margin ({}): a record that young may still be needed to fence a stalled worker",
                duration::render(*older_than),
                duration::render(least)
            )));
        }
    }
    let stores = named_stores(&cli.stores)?;
    let Some(uri) = cli.uri.as_deref() else {
        return Err(Failure::Usage(
            "no server: give --uri or set MONGODB_URI".into(),
        ));
    };
    let store = MongoStore::builder()
        .server_selection_timeout(cli.connect_timeout)
        .app_name("tandem-cli")
        .connect(uri)
        .await?;
    store.ping().await?;
    records_exist(&store, &cli.db, &cli.collection).await?;
    let store: Arc<dyn Store> = Arc::new(store);
    let mut named: Vec<(String, Arc<dyn Store>)> = Vec::with_capacity(cli.stores.len());
    for (name, uri) in stores {
        let connect = async {
            let other = MongoStore::builder()
                .server_selection_timeout(cli.connect_timeout)
                .app_name("tandem-cli")
                .connect(&uri)
                .await?;
            other.ping().await?;
            Ok::<_, StoreError>(other)
        };
        let other = connect.await.map_err(|e| {
            let mut f = Failure::from(e);
            if let Failure::Connect(m) | Failure::Incomplete(m) = &mut f {
                *m = format!("store {name:?}: {m}");
            }
            f
        })?;
        named.push((name, Arc::new(other)));
    }
    let ns = Namespace::new(&cli.db, &cli.collection);
    let mut builder = Coordinator::builder_shared(store.clone());
    for (name, other) in &named {
        builder = builder.store_shared(name.clone(), other.clone());
    }
    let coordinator = builder
        .database(&cli.db)
        .config({
            let mut config = tandem::CoordinatorConfig {
                database: cli.db.clone(),
                collection: cli.collection.clone(),
                lease: cli.lease,
                clock_margin: cli.clock_margin,
                ..tandem::CoordinatorConfig::default()
            };
            // Unique to this run, as the library's default is: two
            // commands with the same process id (pid 1 in two containers)
            // would count each other's claims as their own.
            config.owner = format!(
                "tandem-cli-{}-{}",
                std::process::id(),
                bson::oid::ObjectId::new().to_hex()
            );
            config
        })
        .build();
    match cli.command {
        Command::Status { json, watch, times } => match watch {
            None => status(store.as_ref(), &ns, json).await,
            Some(every) => {
                let mut printed = 0;
                loop {
                    if !json {
                        println!("-- {}", store.now().await?);
                    }
                    status(store.as_ref(), &ns, json).await?;
                    printed += 1;
                    if times.is_some_and(|n| printed >= n) {
                        return Ok(());
                    }
                    tokio::time::sleep(every).await;
                }
            }
        },
        Command::List {
            state,
            older_than,
            owner,
            stuck,
            limit,
            json,
        } => {
            let now = store.now().await?;
            let mut filter = bson::Document::new();
            if let Some(state) = state {
                filter.insert("state", state);
            }
            if let Some(age) = older_than {
                filter.insert("lastModified", doc! { "$lte": minus(now, age) });
            }
            if let Some(owner) = owner {
                filter.insert("owner", owner);
            }
            if let Some(claims) = stuck {
                let in_flight: Vec<bson::Bson> =
                    TxState::in_flight().into_iter().map(Into::into).collect();
                if !filter.contains_key("state") {
                    filter.insert("state", doc! { "$in": in_flight });
                }
                filter.insert("attempts", doc! { "$gte": claims });
            }
            let records = load(store.as_ref(), &ns, filter, Some(limit)).await?;
            if json {
                output::print_json(&serde_json::Value::Array(
                    records.iter().map(output::record_json).collect(),
                ));
            } else {
                print!("{}", output::table(&records, now));
            }
            Ok(())
        }
        Command::Show { id, json } => {
            let (record, documents) = show(store.as_ref(), &named, &cli.db, &ns, &id).await?;
            if json {
                let mut value = output::record_json(&record);
                if let Some(map) = value.as_object_mut() {
                    map.insert(
                        "documents".into(),
                        serde_json::Value::Array(
                            documents
                                .iter()
                                .map(|d| serde_json::Value::String(d.clone()))
                                .collect(),
                        ),
                    );
                }
                output::print_json(&value);
            } else {
                print!("{}", output::details(&record, &documents));
            }
            Ok(())
        }
        Command::Explain { id, mermaid } => {
            let record = find(store.as_ref(), &ns, &id).await?;
            // A record without its changes has no plan to show: a native
            // transaction's, the stub garbage collection leaves of a keyed
            // one, and the one a keyed transaction refused before its own
            // record was written takes its key with.
            let unrecorded = if record.native {
                Some("ran natively: its changes are not recorded")
            } else if record.stub_until.is_some() {
                Some("is a stub garbage collection left (its id and outcome): its changes are not recorded any more")
            } else if record.participants.is_empty() {
                Some("was refused before its record was written: its changes are not recorded")
            } else {
                None
            };
            if let Some(why) = unrecorded {
                let line = format!(
                    "transaction {} ({}) {why}, so there is no plan to show",
                    record.id, record.state
                );
                if mermaid {
                    println!("%% {line}");
                } else {
                    println!("{line}");
                }
                return Ok(());
            }
            let mut tx = tandem::Transaction::new().strategy(tandem::Strategy::TwoPhase);
            let mut skipped = Vec::new();
            for p in &record.participants {
                match document_change(p) {
                    Ok(change) => tx = tx.change(change),
                    Err(_) => skipped.push(format!("{} (kind {:?})", p.label, p.kind)),
                }
            }
            let plan = coordinator.explain(&tx);
            if mermaid {
                print!("{}", plan.mermaid());
            } else {
                println!(
                    "transaction {} ({}), recorded, so two-phase:",
                    record.id, record.state
                );
                print!("{plan}");
                for s in skipped {
                    println!("not shown: {s}, a hand-written participant");
                }
            }
            Ok(())
        }
        Command::Recover { forward, batch } => {
            recover(
                &coordinator,
                forward,
                usize::try_from(batch).unwrap_or(usize::MAX),
            )
            .await
        }
        Command::Cancel { id, reason } => {
            cancel(&coordinator, store.as_ref(), &ns, &id, &reason).await
        }
        Command::Gc {
            older_than,
            idempotency_window,
        } => gc(&coordinator, older_than, idempotency_window, true)
            .await
            .map(|_| ()),
    }
}

/// `tandem gc`: collections until the records due when it started are
/// collected; returns how many records were removed or reduced to stubs.
/// `progress` draws a spinner on a terminal.
async fn gc(
    coordinator: &Coordinator,
    older_than: Duration,
    idempotency_window: Duration,
    progress: bool,
) -> Result<usize, Failure> {
    let worker = coordinator.recovery(RecoveryConfig {
        idempotency_window,
        ..RecoveryConfig::default()
    });
    // Progress on a terminal, a page at a time (drawn nowhere else).
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_draw_target(if progress {
        indicatif::ProgressDrawTarget::stderr()
    } else {
        indicatif::ProgressDrawTarget::hidden()
    });
    let mut total = 0;
    let mut rounds = Rounds::default();
    loop {
        let removed = worker.collect_garbage(older_than).await?;
        total += removed;
        bar.set_message(format!("removed {total} finished transaction records"));
        bar.tick();
        // A collection that removed nothing may have stopped at its
        // page limit before records it could remove: go on until
        // one read up to the last due record.
        if rounds.over(removed > 0, worker.caught_up()) {
            break;
        }
    }
    bar.finish_and_clear();
    println!("removed {total} finished transaction records (those of caller-chosen ids inside the idempotency window kept as stubs)");
    Ok(total)
}

fn minus(now: bson::DateTime, age: Duration) -> bson::DateTime {
    bson::DateTime::from_millis(
        now.timestamp_millis()
            .saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)),
    )
}

async fn load(
    store: &dyn Store,
    ns: &Namespace,
    filter: bson::Document,
    limit: Option<i64>,
) -> Result<Vec<TxRecord>, Failure> {
    let docs = store
        .find(
            ns,
            filter,
            FindOptions {
                sort: Some(doc! { "lastModified": 1 }),
                limit,
            },
        )
        .await?;
    docs.into_iter()
        .map(|d| {
            TxRecord::from_document(d)
                .map_err(|e| Failure::Incomplete(format!("unreadable record: {e}")))
        })
        .collect()
}

async fn find(store: &dyn Store, ns: &Namespace, id: &str) -> Result<TxRecord, Failure> {
    let doc = store
        .find_one(ns, doc! { "_id": id })
        .await?
        .ok_or_else(|| Failure::NotFound(format!("no transaction {id:?} in {ns}")))?;
    TxRecord::from_document(doc).map_err(|e| Failure::Incomplete(format!("unreadable record: {e}")))
}

async fn status(store: &dyn Store, ns: &Namespace, json: bool) -> Result<(), Failure> {
    let now = store.now().await?;
    let mut counts = Vec::new();
    for state in TxState::ALL {
        let n = store.count(ns, doc! { "state": state }).await?;
        counts.push((state, n));
    }
    let in_flight: Vec<bson::Bson> = TxState::in_flight().into_iter().map(Into::into).collect();
    let oldest = load(store, ns, doc! { "state": { "$in": in_flight } }, Some(1))
        .await?
        .into_iter()
        .next();
    let age = oldest.as_ref().and_then(|r| output::age(r, now));
    if json {
        let mut value = serde_json::Map::new();
        for (state, n) in &counts {
            value.insert(state.to_string(), serde_json::json!(n));
        }
        value.insert(
            "oldestInFlight".into(),
            match (&oldest, age) {
                (Some(r), Some(a)) => serde_json::json!({ "id": r.id.as_str(), "state": r.state.as_str(), "ageMillis": a.as_millis() as u64 }),
                _ => serde_json::Value::Null,
            },
        );
        output::print_json(&serde_json::Value::Object(value));
    } else {
        for (state, n) in &counts {
            println!("{:<10} {n}", state.as_str());
        }
        match (&oldest, age) {
            (Some(r), Some(a)) => println!(
                "oldest in flight: {} ({}, unchanged for {})",
                r.id,
                r.state,
                duration::render(a)
            ),
            _ => println!("oldest in flight: none"),
        }
    }
    Ok(())
}

/// Fails with [`Failure::NoRecords`] when `db.collection` does not exist,
/// naming the databases that hold a collection of that name.
async fn records_exist(store: &MongoStore, db: &str, collection: &str) -> Result<(), Failure> {
    let client = store.client();
    let names = client
        .database(db)
        .list_collection_names()
        .await
        .map_err(|e| Failure::Connect(format!("listing the collections of {db}: {e}")))?;
    if names.iter().any(|n| n == collection) {
        return Ok(());
    }
    let mut holders = Vec::new();
    if let Ok(dbs) = client.list_database_names().await {
        for other in dbs {
            if let Ok(names) = client.database(&other).list_collection_names().await {
                if names.iter().any(|n| n == collection) {
                    holders.push(other);
                }
            }
        }
    }
    let hint = if holders.is_empty() {
        format!("no database on this server has a {collection:?} collection")
    } else {
        format!(
            "databases with a {collection:?} collection: {} (pass one with --db)",
            holders.join(", ")
        )
    };
    Err(Failure::NoRecords(format!(
        "no transaction records here: {db}.{collection} does not exist; the records live in the \
         database the applications' coordinators were given; {hint}"
    )))
}

/// How many times `show` reads a record and its documents before it gives
/// up on a transaction that keeps moving while they are read.
const SHOW_READS: usize = 8;

/// `tandem show`: the record `id` and what each participant's document
/// says about its change, read together. The documents are read after the
/// record, and a transaction may move on in between (its markers cleared
/// once it reached `applied`, or undone once `canceling`): a document read
/// then would be judged by a state the record no longer has (a cleared
/// marker of a committed change read as "not applied yet" under a
/// `pending` record). So the record is read again after its documents, and
/// the answer stands only if it did not move meanwhile; otherwise all is
/// read again under the record as it is now. A record that stays put
/// leaves its documents only the changes its state allows (applies while
/// `pending`, clears while `applied`, undos while `canceling`), which each
/// judgement allows for.
async fn show(
    store: &dyn Store,
    named: &[(String, Arc<dyn Store>)],
    db: &str,
    ns: &Namespace,
    id: &str,
) -> Result<(TxRecord, Vec<String>), Failure> {
    let mut record = find(store, ns, id).await?;
    for _ in 0..SHOW_READS {
        let mut documents = Vec::with_capacity(record.participants.len());
        for p in &record.participants {
            documents.push(participant_document(store, named, db, &record, p).await?);
        }
        let again = find(store, ns, id).await?;
        let unmoved = again.state == record.state
            && again.epoch == record.epoch
            && again.token == record.token
            && again.last_modified == record.last_modified;
        if unmoved {
            return Ok((record, documents));
        }
        record = again;
    }
    Err(Failure::Incomplete(format!(
        "{id} kept moving while its documents were read ({SHOW_READS} times); try again"
    )))
}

/// The document change a record's participant entry holds, or why there is none.
fn document_change(p: &tandem::record::ParticipantEntry) -> Result<tandem::DocumentChange, String> {
    if p.kind != "document" {
        return Err(format!(
            "a participant of kind {:?}: not a document this tool reads",
            p.kind
        ));
    }
    bson::from_document(p.spec.clone()).map_err(|e| format!("unreadable change: {e}"))
}

/// What a participant's document says about its change: found by its
/// namespace and `_id`, in the default store or a named one (`--store`).
async fn participant_document(
    store: &dyn Store,
    named: &[(String, Arc<dyn Store>)],
    db: &str,
    record: &TxRecord,
    p: &tandem::record::ParticipantEntry,
) -> Result<String, Failure> {
    let change = match document_change(p) {
        Ok(c) => c,
        Err(why) => return Ok(why),
    };
    let store = match &change.store {
        None => store,
        Some(name) => match named.iter().find(|(n, _)| n == name) {
            Some((_, other)) => other.as_ref(),
            None => {
                return Ok(format!(
                    "in store {name:?}, which this tool does not reach (give --store {name}=URI)"
                ))
            }
        },
    };
    // A store given under the recorded name may be another database: its
    // documents say nothing of this change (no marker there would read as
    // "not applied" for a change that committed).
    if let (Some(name), Some(recorded)) = (&change.store, &p.store_uid) {
        let here = tandem::store::store_identity(store, db).await?;
        if here.as_deref() != Some(recorded.as_str()) {
            return Ok(format!(
                "in store {name:?}, but the store given under that name is another database \
                 (identity {}, the change was made where it is {recorded}): not read",
                here.as_deref().unwrap_or("none")
            ));
        }
    }
    let doc = store
        .find_one(&change.namespace, doc! { "_id": change.id.clone() })
        .await?;
    // A document changed twice through two store names carries a marker of
    // its own for the second change, which the record entry keeps.
    let marker = p
        .marker
        .clone()
        .unwrap_or_else(|| record.marker().as_str().to_owned());
    let Some(doc) = doc else {
        return Ok(match record.state {
            TxState::Done | TxState::Applied => {
                "document absent (deleted by this transaction, or since)".into()
            }
            _ => "document absent".into(),
        });
    };
    let ghost = doc
        .get_document("_tandem")
        .ok()
        .and_then(|t| t.get_bool("ghost").ok())
        .unwrap_or(false);
    if ghost {
        // A placeholder says nothing of this change beyond its state: the
        // `_id` may have been reserved again by a later insert after this
        // transaction deleted the document (or after the document it
        // changed was deleted since).
        return Ok(match record.state {
            TxState::Initial | TxState::Pending => {
                "a placeholder: its _id is reserved for an insert, nothing applied yet".into()
            }
            TxState::Applied | TxState::Done => {
                "a placeholder (its _id reserved again for an insert): applied and committed, the document deleted by this transaction or since".into()
            }
            TxState::Canceling | TxState::Canceled => {
                "a placeholder (its _id reserved for an insert): not applied, or undone".into()
            }
        });
    }
    let marked = doc
        .get_array(&change.marker)
        .map(|m| m.iter().any(|v| v.as_str() == Some(marker.as_str())))
        .unwrap_or(false);
    Ok(match (record.state, marked) {
        (TxState::Pending, true) if record.early_commit => {
            "applied (marked); committed if every participant is".into()
        }
        (TxState::Pending, true) => "applied, not committed yet (marked)".into(),
        (TxState::Initial, false) => "not applied (no marker)".into(),
        // An apply sent may still land until the epoch's deadline.
        (TxState::Pending, false) => format!(
            "not applied yet (no marker; an apply in flight may land until {})",
            record.deadline().try_to_rfc3339_string().unwrap_or_default()
        ),
        (TxState::Applied, true) => "applied and committed; marker not cleared yet".into(),
        (TxState::Applied | TxState::Done, false) => "applied and committed".into(),
        (TxState::Canceling, true) => "applied, to be undone (marked)".into(),
        (TxState::Canceling | TxState::Canceled, false) => {
            "not applied, or undone (no marker)".into()
        }
        // No step of tandem looks at a finished (or `initial`) record's
        // documents again: a marker left there stays until removed by hand.
        (state, true) => format!(
            "marked although the transaction is {state}: no step of tandem removes this marker (a write outside tandem put it back?); remove it by hand"
        ),
    })
}

/// `tandem cancel`: cancels `id` (or says why not, and what it did).
async fn cancel(
    coordinator: &Coordinator,
    store: &dyn Store,
    ns: &Namespace,
    id: &str,
    reason: &str,
) -> Result<(), Failure> {
    let record = find(store, ns, id).await?;
    match coordinator.cancel(&record.id, reason).await {
        Ok(TxState::Canceled) => {
            println!("{id}: canceled");
            Ok(())
        }
        Ok(TxState::Canceling) => {
            let record = find(store, ns, id).await?;
            let after = record
                .not_before
                .map(|t| t.try_to_rfc3339_string().unwrap_or_else(|_| t.to_string()))
                .unwrap_or_else(|| "its owner's deadline".into());
            println!(
                "{id}: canceling: decided; its changes are undone once applies still in flight can no longer land (after {after}, by the stores' clocks), or after a store failure met while undoing; `tandem recover` finishes it then"
            );
            Ok(())
        }
        Ok(TxState::Initial) => {
            println!("{id}: removed (nothing had been applied)");
            Ok(())
        }
        Ok(TxState::Pending) => {
            let record = find(store, ns, id).await?;
            let after = record
                .not_before
                .map(|t| t.try_to_rfc3339_string().unwrap_or_else(|_| t.to_string()))
                .unwrap_or_else(|| "its owner's deadline".into());
            Err(Failure::Incomplete(format!(
                "{id}: pending: undecided while its owner's applies may still land (until {after}, by the stores' clocks): it commits if every apply lands; run `tandem cancel` again after that to roll back what did not (the request is not remembered: a recovery run that rolls pending transactions forward, `recover --forward`, commits it instead)"
            )))
        }
        Ok(state) if !record.state.is_terminal() && state != record.state => {
            // It had committed at its applies. The cancel finished it if it
            // claimed the record (a claim raises the epoch and names as the
            // owner the recovery worker this command runs, whose name is the
            // command's, unique to this run, followed by `-recovery-`);
            // otherwise its owner, or a recovery worker, finished it while
            // this command ran.
            let worker = format!("{}-recovery-", coordinator.config().owner);
            let claimed_here = find(store, ns, id).await.is_ok_and(|now| {
                now.epoch > record.epoch && now.owner.starts_with(&worker)
            });
            let by = if claimed_here {
                "finished by this command"
            } else {
                "moved on by its owner or a recovery worker while this command ran"
            };
            Err(Failure::Refused(format!(
                "{id} had committed (every apply had landed) and is now {state}, {by}: a transaction past its commit point cannot be canceled"
            )))
        }
        Ok(state) => Err(Failure::Refused(format!(
            "{id} is {state}: a transaction past its commit point cannot be canceled"
        ))),
        // Collected between the read above and the cancel.
        Err(e @ TxError::NoRecord { .. }) => Err(Failure::NotFound(e.to_string())),
        Err(TxError::Superseded { state, .. }) => Err(Failure::Refused(format!(
            "{id} changed while canceling (now {}); try again",
            state
                .map(|s| s.to_string())
                .unwrap_or_else(|| "removed".into())
        ))),
        Err(TxError::Invalid(tandem::ChangeError::UnknownKind { kind })) => {
            Err(Failure::Refused(format!(
                "{id} has a hand-written participant of kind {kind:?}, which this command cannot rebuild; cancel it from a program that registers that kind (left as it was)"
            )))
        }
        Err(TxError::Invalid(tandem::ChangeError::UnknownStore { store, .. })) => {
            Err(Failure::Refused(format!(
                "{id} has a participant in the store {store:?}, which this command does not have (it has the --uri server only); cancel it from a program that has that store (left as it was)"
            )))
        }
        Err(TxError::Invalid(e @ tandem::ChangeError::ForeignStore { .. })) => {
            Err(Failure::Refused(format!(
                "{id}: {e}; give --store the URI of the database the transaction was made in (left as it was)"
            )))
        }
        Err(e) => Err(Failure::Incomplete(e.to_string())),
    }
}

async fn recover(coordinator: &Coordinator, forward: bool, batch: usize) -> Result<(), Failure> {
    let worker = coordinator.recovery(RecoveryConfig {
        pending: if forward {
            PendingPolicy::RollForward
        } else {
            PendingPolicy::RollBack
        },
        batch,
        ..RecoveryConfig::default()
    });
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_draw_target(if batch >= 100 {
        indicatif::ProgressDrawTarget::stderr()
    } else {
        indicatif::ProgressDrawTarget::hidden()
    });
    let mut total = tandem::RecoveryReport::default();
    let mut rounds = Rounds::default();
    loop {
        let pass = worker.run_once().await?;
        total += &pass;
        bar.set_message(format!(
            "recovered {} (committed {}, canceled {}, removed {})",
            total.claimed, total.committed, total.canceled, total.removed
        ));
        bar.tick();
        // A pass may stop at its page limit before the records it could
        // recover (behind ones it cannot drive here): go on until one read
        // up to the last due record.
        let finished = pass.claimed > pass.failed + pass.waiting;
        if rounds.over(finished, worker.caught_up()) {
            break;
        }
    }
    bar.finish_and_clear();
    println!(
        "recovered {}: committed {}, canceled {}, removed {}, failed {}, waiting {}, taken by others {}",
        total.claimed,
        total.committed,
        total.canceled,
        total.removed,
        total.failed,
        total.waiting,
        total.lost
    );
    // In flight and not finished: left waiting by this run (claimed by it),
    // or not due yet (an owner's lease, or the clock margin after it).
    let store = coordinator.stores().default_store();
    let ns = Namespace::new(
        &coordinator.config().database,
        &coordinator.config().collection,
    );
    let now = store.now().await?;
    let margin = i64::try_from(coordinator.config().clock_margin.as_millis()).unwrap_or(i64::MAX);
    let in_flight: Vec<bson::Bson> = TxState::in_flight().into_iter().map(Into::into).collect();
    let left = NotDue::of(
        load(
            store.as_ref(),
            &ns,
            doc! { "state": { "$in": in_flight } },
            None,
        )
        .await?,
        worker.owner(),
        now,
        margin,
    );
    if total.waiting > 0 {
        println!(
            "{} transaction(s) wait for applies still in flight to miss their deadline",
            total.waiting
        );
    }
    let again = match left.mine_until {
        Some(at) => {
            println!(
                "{} transaction(s) this run claimed are not finished; recovery may take them again at {}",
                left.mine,
                at_time(at, now)
            );
            format!("run recover again at {}", at_time(at, now))
        }
        None => "run recover again".to_string(),
    };
    if let Some(at) = left.leased_until {
        println!(
            "{} transaction(s) still inside their owners' lease, left alone; the last is due for recovery at {}",
            left.leased,
            at_time(at, now)
        );
    }
    if let Some(at) = left.margin_until {
        println!(
            "{} transaction(s) whose owners' lease has ended wait out the clock margin; the last is due for recovery at {}",
            left.in_margin,
            at_time(at, now)
        );
    }
    if total.failed > 0 {
        return Err(Failure::Incomplete(format!(
            "{} transactions could not be finished this time (a store failed, or one has a participant this command cannot drive: a hand-written kind or another store, which `tandem show` names); {again}",
            total.failed
        )));
    }
    if total.waiting > 0 {
        // Decided or not, they are not finished: a debit may still show.
        return Err(Failure::Incomplete(format!(
            "{} transactions are not finished yet; {again}",
            total.waiting
        )));
    }
    if left.due > 0 {
        return Err(Failure::Incomplete(format!(
            "{} transactions became due for recovery during this run (or another worker's claim of them lapsed); run recover again now",
            left.due
        )));
    }
    if left.in_margin > 0 {
        // Their owners are gone (the lease ended), but no worker may
        // touch them yet: a debit may still show.
        return Err(Failure::Incomplete(format!(
            "{} transactions are not due for recovery yet; run recover again at {}",
            left.in_margin,
            at_time(left.margin_until.unwrap_or(now), now)
        )));
    }
    Ok(())
}

/// When a command that repeats recovery passes or garbage collections
/// stops. A worker reads the records in rounds, each of them up to the last
/// record due when it started ([`tandem::RecoveryWorker::caught_up`] says
/// one ended): the command stops at the end of a round that did nothing,
/// or of its second round. The second takes what the first left behind
/// (a collection stops at its first store error, and records may come due
/// while the first round runs); a third would only chase what comes due
/// while the application runs, and the command would not end until the
/// application stopped.
#[derive(Debug, Default)]
struct Rounds {
    ended: usize,
    did_something: bool,
}

impl Rounds {
    /// Counts a pass (or collection) that `did_something` and, if
    /// `caught_up`, ended a round; whether the command stops there.
    fn over(&mut self, did_something: bool, caught_up: bool) -> bool {
        self.did_something |= did_something;
        if !caught_up {
            return false;
        }
        self.ended += 1;
        let over = !self.did_something || self.ended >= 2;
        self.did_something = false;
        over
    }
}

/// The transactions in flight that a `recover` run left: claimed by it
/// (waiting, or failed), inside their owners' lease, past the lease but not
/// yet past its deadline plus the clock margin (recovery takes a record only
/// then), or due (since the time given) and not taken.
#[derive(Debug, Default, PartialEq)]
struct NotDue {
    mine: usize,
    mine_until: Option<bson::DateTime>,
    leased: usize,
    leased_until: Option<bson::DateTime>,
    in_margin: usize,
    margin_until: Option<bson::DateTime>,
    due: usize,
    due_since: Option<bson::DateTime>,
}

impl NotDue {
    fn of(records: Vec<TxRecord>, me: &str, now: bson::DateTime, margin: i64) -> Self {
        let mut left = NotDue::default();
        for record in records {
            // When recovery may take it: its lease over, and its epoch's
            // deadline plus the margin passed.
            let due = record.lease_expires().unwrap_or(bson::DateTime::MIN).max(
                bson::DateTime::from_millis(
                    record.deadline().timestamp_millis().saturating_add(margin),
                ),
            );
            let (count, until) = if record.owner == me {
                (&mut left.mine, &mut left.mine_until)
            } else if !record.lease_expired(now) {
                (&mut left.leased, &mut left.leased_until)
            } else if due > now {
                (&mut left.in_margin, &mut left.margin_until)
            } else {
                // Due, yet not finished: it became due during the run, or
                // another worker's claim of it lapsed.
                (&mut left.due, &mut left.due_since)
            };
            *count += 1;
            *until = Some(until.map_or(due, |u| u.max(due)));
        }
        left
    }
}

/// `at` as an RFC 3339 time and how far from `now`, by the server's clock.
fn at_time(at: bson::DateTime, now: bson::DateTime) -> String {
    let left = Duration::from_millis(
        u64::try_from(at.timestamp_millis().saturating_sub(now.timestamp_millis())).unwrap_or(0),
    );
    format!(
        "{} (in {}, by the server's clock)",
        at.try_to_rfc3339_string()
            .unwrap_or_else(|_| at.to_string()),
        duration::render(left)
    )
}

/// Parses each `--store NAME=URI`: a name of letters, digits, `_`, `.` and
/// `-` (so a URI given without a name is not taken for one), each name
/// once. The errors never repeat the argument, which may hold a password.
fn named_stores(args: &[String]) -> Result<Vec<(String, String)>, Failure> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(args.len());
    for (i, arg) in args.iter().enumerate() {
        let named = arg.split_once('=').filter(|(name, uri)| {
            !name.is_empty()
                && !uri.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        });
        let Some((name, uri)) = named else {
            return Err(Failure::Usage(format!(
                "--store number {}: expected NAME=URI, a name of letters, digits, `_`, `.` or `-`",
                i + 1
            )));
        };
        if out.iter().any(|(n, _)| n == name) {
            return Err(Failure::Usage(format!("--store {name:?} is given twice")));
        }
        out.push((name.to_owned(), uri.to_owned()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{named_stores, Failure};

    #[test]
    fn store_names_are_checked_without_repeating_the_argument() {
        let secret = "s3cr3t-Pa55";
        let refused = |args: &[&str]| {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            match named_stores(&args) {
                Err(Failure::Usage(m)) => m,
                other => panic!("expected a usage error, got {other:?}"),
            }
        };
        for given in [
            format!("mongodb://admin:{secret}@db.example:27017/"),
            format!("mongodb://admin:{secret}@db.example:27017/?authSource=admin"),
            format!("=mongodb://admin:{secret}@db.example"),
            "ledger=".to_owned(),
        ] {
            let m = refused(&[&given]);
            assert!(!m.contains(secret), "{m}");
            assert!(m.contains("expected NAME=URI"), "{m}");
        }
        let m = refused(&["ledger=mongodb://a:27017", "ledger=mongodb://b:27017"]);
        assert!(m.contains("given twice"), "{m}");
        let ok = named_stores(&[
            "ledger=mongodb://a:27017/?authSource=admin".to_owned(),
            "eu-west.2=mongodb://b".to_owned(),
        ])
        .unwrap();
        assert_eq!(
            ok,
            [
                (
                    "ledger".to_owned(),
                    "mongodb://a:27017/?authSource=admin".to_owned()
                ),
                ("eu-west.2".to_owned(), "mongodb://b".to_owned()),
            ]
        );
    }

    use super::*;
    use tandem::testing::FaultStore;
    use tandem::{DocumentChange, Namespace, Transaction};

    /// `show` judges a participant by the marker its change carries: its
    /// own (`<marker>/<index>`, for a document named twice through two store
    /// names) where the record entry keeps one. It judged both changes of A
    /// by the record's marker, so after one debit only, both were "applied".
    /// At every crash point of the coordinator, the changes said applied are
    /// the debits A shows.
    #[tokio::test]
    async fn show_reads_a_participants_own_marker() {
        let accounts = Namespace::new("bank", "accounts");
        let debit = || DocumentChange::update(accounts.clone(), "A").inc("balance", -1_i64);
        let mut one_debit = 0;
        for n in 1..12 {
            let store = tandem::MemoryStore::new();
            store
                .insert_one(&accounts, doc! { "_id": "A", "balance": 100_i64 })
                .await
                .unwrap();
            let faulty = FaultStore::new(Arc::new(store.clone())).crash_after(n);
            let coordinator = Coordinator::builder(faulty.clone())
                .store("main", faulty)
                .build();
            let tx = Transaction::new()
                .change(debit().in_store("main"))
                .change(debit());
            // Answered at the commit point (its applies), or interrupted.
            let id = match coordinator.run(tx).await {
                Ok(receipt) => receipt.id,
                Err(e) => e.id().cloned().expect("an id"),
            };
            let Some(record) = Coordinator::new(store.clone()).record(&id).await.unwrap() else {
                continue;
            };
            if record.state != TxState::Pending {
                continue;
            }
            let a = store
                .find_one(&accounts, doc! { "_id": "A" })
                .await
                .unwrap()
                .unwrap();
            let debits = 100 - a.get_i64("balance").unwrap();
            if debits == 1 {
                one_debit += 1;
            }
            // The first change names A in the store "main", which `show`
            // does not reach; read it as the default store's.
            let mut applied = 0;
            for p in &record.participants {
                let mut p = p.clone();
                p.spec.remove("store");
                let said = participant_document(&store, &[], "tandem", &record, &p)
                    .await
                    .unwrap();
                if said.starts_with("applied") {
                    applied += 1;
                }
            }
            assert_eq!(applied, debits, "crash after op {n}: {a}");
        }
        assert!(one_debit > 0, "no crash point left one debit only");
    }

    /// `show` read a record, then its documents: a transaction that
    /// finished in between (its owner went on from its applies to `done`)
    /// had its markers cleared, and the documents of its committed changes
    /// were judged by the `pending` record read first: "not applied yet".
    /// It reads the record again after the documents and reads all again
    /// where the record moved.
    #[tokio::test]
    async fn show_judges_documents_by_the_record_they_were_read_under() {
        let (store, _clock, _) = two_accounts().await;
        let (run, owner_pause) = owner_paused_after_applies(&store).await;
        // The command reads the record (`pending`), then stops before it
        // reads the first document.
        let cli_store = FaultStore::new(Arc::new(store.clone()));
        let cli_pause = cli_store.pause_at(2);
        let command = tokio::spawn(async move {
            let ns = Namespace::new("tandem", "transactions");
            show(&cli_store, &[], "tandem", &ns, "pay-1").await
        });
        cli_pause.reached.await.unwrap();
        // The owner finishes its transaction: markers cleared, `done`.
        owner_pause.release.send(()).unwrap();
        assert_eq!(run.await.unwrap().unwrap().state, TxState::Done);
        cli_pause.release.send(()).unwrap();
        let (record, documents) = command.await.unwrap().unwrap();
        assert_eq!(documents.len(), 2);
        for d in &documents {
            assert!(
                !d.contains("not applied"),
                "{} shown with {documents:?}",
                record.state
            );
        }
        assert_eq!(record.state, TxState::Done, "{documents:?}");
    }

    /// A placeholder at the `_id` of a committed change is a later
    /// insert's reservation (the document deleted by the change, or
    /// since): `show` said "nothing applied" of a committed delete whose
    /// `_id` a new insert had reserved.
    #[tokio::test]
    async fn show_does_not_say_a_committed_delete_applied_nothing() {
        let vouchers = Namespace::new("bank", "vouchers");
        let store = tandem::MemoryStore::new();
        store
            .insert_one(&vouchers, doc! { "_id": "V", "amount": 5_i64 })
            .await
            .unwrap();
        let coordinator = Coordinator::new(store.clone());
        coordinator
            .run(
                Transaction::with_id("redeem")
                    .strategy(tandem::Strategy::TwoPhase)
                    .change(DocumentChange::delete(vouchers.clone(), "V")),
            )
            .await
            .unwrap();
        coordinator.drain().await;
        // V issued again: the insert reserves its `_id`, and its
        // coordinator dies right after.
        let mut reserved = false;
        for n in 1..8 {
            let dying = Coordinator::new(FaultStore::new(Arc::new(store.clone())).crash_after(n));
            let _ = dying
                .run(
                    Transaction::new()
                        .strategy(tandem::Strategy::TwoPhase)
                        .change(DocumentChange::insert(
                            vouchers.clone(),
                            "V",
                            doc! { "amount": 7_i64 },
                        )),
                )
                .await;
            let placeholder = doc! { "_id": "V", "_tandem.ghost": true };
            if store.exists(&vouchers, placeholder).await.unwrap() {
                reserved = true;
                break;
            }
        }
        assert!(reserved, "no crash point left a placeholder");
        let ns = Namespace::new("tandem", "transactions");
        let (record, documents) = show(&store, &[], "tandem", &ns, "redeem").await.unwrap();
        assert_eq!(record.state, TxState::Done);
        assert!(documents[0].starts_with("a placeholder"), "{documents:?}");
        assert!(
            !documents[0].contains("nothing applied"),
            "a committed delete: {documents:?}"
        );
    }

    /// A marker of a finished transaction (put back by a write outside
    /// tandem, a restore of the document) is one no step of tandem removes:
    /// recovery and garbage collection never look at a finished record's
    /// documents. `show` said "recovery removes it".
    #[tokio::test]
    async fn show_does_not_promise_a_removal_nothing_makes() {
        let accounts = Namespace::new("bank", "accounts");
        let store = tandem::MemoryStore::new();
        store
            .insert_one(&accounts, doc! { "_id": "A", "balance": 100_i64 })
            .await
            .unwrap();
        let coordinator = Coordinator::builder(store.clone())
            .commit_point(tandem::CommitPoint::Done)
            .build();
        let tx = Transaction::new()
            .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -1_i64));
        let id = coordinator.run(tx).await.unwrap().id;
        let record = coordinator.record(&id).await.unwrap().unwrap();
        assert_eq!(record.state, TxState::Done);
        let marker = record.marker();
        store
            .update_one(
                &accounts,
                doc! { "_id": "A" },
                doc! { "$push": { "pendingTransactions": marker.as_str() } },
                tandem::store::UpdateOptions::default(),
            )
            .await
            .unwrap();
        let said = participant_document(&store, &[], "tandem", &record, &record.participants[0])
            .await
            .unwrap();
        let worker = coordinator.recovery(tandem::RecoveryConfig::default());
        worker.run_once().await.unwrap();
        let a = store
            .find_one(&accounts, doc! { "_id": "A" })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            a.get_array("pendingTransactions").unwrap().len(),
            1,
            "recovery left the marker"
        );
        assert!(said.starts_with("marked although"), "{said}");
        assert!(!said.contains("recovery removes it"), "{said}");
    }

    /// `show` reads a named store's document only where the store given
    /// under the name is the database the change was made in: another one
    /// (here, a fresh store holding a document of the same `_id`, without
    /// or with another identity) has no marker of the change, and was said
    /// "not applied" for a change that committed.
    #[tokio::test]
    async fn show_does_not_read_another_database_under_a_recorded_name() {
        let accounts = Namespace::new("bank", "accounts");
        let main = tandem::MemoryStore::new();
        let ledger = tandem::MemoryStore::new();
        let b = doc! { "_id": "B", "balance": 0_i64 };
        main.insert_one(&accounts, doc! { "_id": "A", "balance": 10_i64 })
            .await
            .unwrap();
        ledger.insert_one(&accounts, b.clone()).await.unwrap();
        // The transaction stops at its commit point, markers on.
        let faulty = FaultStore::new(Arc::new(main.clone())).crash_after(2);
        let coordinator = Coordinator::builder(faulty)
            .store("ledger", ledger.clone())
            .build();
        let tx = Transaction::new()
            .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -1_i64))
            .change(
                DocumentChange::update(accounts.clone(), "B")
                    .inc("balance", 1_i64)
                    .in_store("ledger"),
            );
        let id = match coordinator.run(tx).await {
            Ok(receipt) => receipt.id,
            Err(e) => e.id().cloned().expect("an id"),
        };
        let record = Coordinator::new(main.clone())
            .record(&id)
            .await
            .unwrap()
            .expect("the record");
        assert_eq!(record.state, TxState::Pending);
        let db = tandem::CoordinatorConfig::default().database;
        let p = &record.participants[1];
        assert!(p.store_uid.is_some(), "{p:?}");
        let said = |store: tandem::MemoryStore| {
            let named: Vec<(String, Arc<dyn Store>)> = vec![("ledger".into(), Arc::new(store))];
            let (main, record, db) = (main.clone(), record.clone(), db.clone());
            let p = p.clone();
            async move {
                participant_document(&main, &named, &db, &record, &p)
                    .await
                    .unwrap()
            }
        };
        let right = said(ledger.clone()).await;
        assert!(right.starts_with("applied"), "{right}");
        let other = tandem::MemoryStore::new();
        other.insert_one(&accounts, b.clone()).await.unwrap();
        let unknown = said(other.clone()).await;
        assert!(
            unknown.contains("another database (identity none"),
            "{unknown}"
        );
        other
            .insert_one(
                &Namespace::new(&db, "tandem_store"),
                doc! { "_id": "identity", "uid": "not-the-ledger" },
            )
            .await
            .unwrap();
        let foreign = said(other).await;
        assert!(foreign.contains("identity not-the-ledger"), "{foreign}");
    }

    /// `recover` exits 1 (`Incomplete`) while a transaction it claimed is
    /// left unfinished: a refused roll forward whose undo must wait (an
    /// apply's answer was lost) is `canceling` with the debit applied, and
    /// the command said "canceled 1 ... waiting 0" and exited 0.
    #[tokio::test]
    async fn recover_exits_1_while_a_transaction_waits() {
        let accounts = Namespace::new("bank", "accounts");
        let transfer = || {
            Transaction::new()
                .change(
                    DocumentChange::update(accounts.clone(), "A")
                        .inc("balance", -100_i64)
                        .require_gte("balance", 100_i64),
                )
                .change(DocumentChange::update(accounts.clone(), "B").inc("balance", 100_i64))
        };
        let mut waiting = 0;
        for n in 1..40 {
            let clock = Arc::new(tandem::ManualClock::default());
            let store = tandem::MemoryStore::with_clock(clock.clone());
            for id in ["A", "B"] {
                store
                    .insert_one(&accounts, doc! { "_id": id, "balance": 1000_i64 })
                    .await
                    .unwrap();
            }
            // The owner crashes after writing its record.
            let dead = FaultStore::new(Arc::new(store.clone())).crash_after(1);
            let id = match Coordinator::builder(dead).build().run(transfer()).await {
                Err(e) => e.id().cloned().expect("an id"),
                Ok(r) => panic!("{r:?}"),
            };
            store
                .delete_one(&accounts, doc! { "_id": "B" })
                .await
                .unwrap();
            clock.advance(std::time::Duration::from_secs(33));
            let lossy = FaultStore::new(Arc::new(store.clone())).lose_at(n);
            let coordinator = Coordinator::builder(lossy).build();
            let answer = recover(&coordinator, true, 10).await;
            let record = Coordinator::new(store.clone())
                .record(&id)
                .await
                .unwrap()
                .expect("the record");
            // Finished: exit 0. Not finished: never exit 0; decided and
            // waiting (`canceling`): exit 1 saying so.
            // (A lost answer of one of the command's own reads may fail it
            // even when the transaction is finished.)
            if !record.state.is_terminal() {
                assert!(
                    answer.is_err(),
                    "lost op {n}: record {}, exit 0",
                    record.state
                );
            }
            if matches!(&answer, Err(Failure::Incomplete(m)) if m.contains("not finished")) {
                assert_eq!(record.state, TxState::Canceling, "lost op {n}");
                waiting += 1;
            }
        }
        assert!(waiting > 0, "no lost answer left the transaction waiting");
    }

    /// A store on a manual clock with accounts A and B (1000 each), and a
    /// transfer of 100 from A to B.
    async fn two_accounts() -> (tandem::MemoryStore, Arc<tandem::ManualClock>, Transaction) {
        let accounts = Namespace::new("bank", "accounts");
        let clock = Arc::new(tandem::ManualClock::default());
        let store = tandem::MemoryStore::with_clock(clock.clone());
        for id in ["A", "B"] {
            store
                .insert_one(&accounts, doc! { "_id": id, "balance": 1000_i64 })
                .await
                .unwrap();
        }
        let transfer = Transaction::new()
            .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -100_i64))
            .change(DocumentChange::update(accounts, "B").inc("balance", 100_i64));
        (store, clock, transfer)
    }

    /// A transfer of 100 from A to B under the id `pay-1`, its owner
    /// stopped after its record (1) and its applies (2): committed, the
    /// record still `pending`. Release the pause to let the owner finish.
    async fn owner_paused_after_applies(
        store: &tandem::MemoryStore,
    ) -> (
        tokio::task::JoinHandle<Result<tandem::Receipt, tandem::TxError>>,
        tandem::testing::Pause,
    ) {
        let accounts = Namespace::new("bank", "accounts");
        let transfer = Transaction::with_id("pay-1")
            .change(DocumentChange::update(accounts.clone(), "A").inc("balance", -100_i64))
            .change(DocumentChange::update(accounts, "B").inc("balance", 100_i64));
        let owner_store = FaultStore::new(Arc::new(store.clone()));
        let mut owner_pause = owner_store.pause_at(3);
        let owner = Coordinator::builder(owner_store)
            .commit_point(tandem::CommitPoint::Done)
            .build();
        let run = tokio::spawn(async move { owner.run(transfer).await });
        (&mut owner_pause.reached).await.unwrap();
        (run, owner_pause)
    }

    /// After its owner's lease, a transaction is not due for recovery until
    /// its deadline plus the clock margin: `recover` exited 0 then, and named
    /// the lease's end as the time to come back (itself inside the margin).
    #[tokio::test]
    async fn recover_exits_1_within_the_margin_and_names_when_it_is_due() {
        let (store, clock, transfer) = two_accounts().await;
        // The owner crashes after its record and A's debit.
        let dead = FaultStore::new(Arc::new(store.clone())).crash_after(2);
        let id = match Coordinator::builder(dead).build().run(transfer).await {
            Err(e) => e.id().cloned().expect("an id"),
            Ok(r) => panic!("{r:?}"),
        };
        let coordinator = Coordinator::builder(store.clone()).build();
        let record = coordinator.record(&id).await.unwrap().expect("the record");
        let margin = i64::try_from(coordinator.config().clock_margin.as_millis()).unwrap();
        let due = record.deadline().timestamp_millis() + margin;

        // Past the lease (30 s), inside the margin (2 s).
        clock.advance(std::time::Duration::from_secs(31));
        let now = store.now().await.unwrap();
        let left = NotDue::of(vec![record.clone()], "me", now, margin);
        assert_eq!(
            (
                left.in_margin,
                left.margin_until.map(|t| t.timestamp_millis())
            ),
            (1, Some(due))
        );
        let answer = recover(&coordinator, false, 10).await;
        assert!(
            matches!(&answer, Err(Failure::Incomplete(m)) if m.contains("not due")),
            "{answer:?}"
        );
        assert!(!coordinator
            .record(&id)
            .await
            .unwrap()
            .unwrap()
            .state
            .is_terminal());

        // At the time it named: due, and finished.
        clock.advance(std::time::Duration::from_millis(
            u64::try_from(due - now.timestamp_millis()).unwrap(),
        ));
        recover(&coordinator, false, 10).await.unwrap();
        let record = coordinator.record(&id).await.unwrap().unwrap();
        assert_eq!(record.state, TxState::Canceled);
    }

    /// `cancel` of a transaction that had committed at its applies (its
    /// owner crashed after both) finishes it, and says so: it said only
    /// "cannot be canceled", for a record it had just moved to `done`.
    #[tokio::test]
    async fn cancel_says_it_finished_a_committed_transaction() {
        let (store, clock, transfer) = two_accounts().await;
        // 1 the record, 2 and 3 the applies; then the owner is gone.
        let dead = FaultStore::new(Arc::new(store.clone())).crash_after(3);
        let id = Coordinator::builder(dead)
            .build()
            .run(transfer)
            .await
            .map(|r| r.id.clone())
            .unwrap_or_else(|e| e.id().cloned().expect("an id"));
        clock.advance(std::time::Duration::from_secs(33));
        let coordinator = Coordinator::builder(store.clone()).build();
        let ns = Namespace::new("tandem", "transactions");
        let answer = cancel(&coordinator, &store, &ns, id.as_str(), "test").await;
        assert!(
            matches!(&answer, Err(Failure::Refused(m)) if m.contains("had committed") && m.contains("done")),
            "{answer:?}"
        );
        let record = coordinator.record(&id).await.unwrap().unwrap();
        assert_eq!(record.state, TxState::Done);
    }

    /// `cancel` of a transaction that had committed at its applies, which
    /// the command itself finishes, names the command as the one that
    /// finished it: it compared the record's owner with the coordinator's
    /// name, while the claim names the recovery worker the command runs, so
    /// it said "moved on by its owner or a recovery worker while this
    /// command ran" of a record only the command had touched.
    #[tokio::test]
    async fn cancel_names_itself_when_it_finished_the_transaction() {
        let (store, clock, transfer) = two_accounts().await;
        // 1 the record, 2 and 3 the applies; then the owner is gone.
        let dead = FaultStore::new(Arc::new(store.clone())).crash_after(3);
        let id = Coordinator::builder(dead)
            .build()
            .run(transfer)
            .await
            .map(|r| r.id.clone())
            .unwrap_or_else(|e| e.id().cloned().expect("an id"));
        clock.advance(std::time::Duration::from_secs(33));
        let coordinator = Coordinator::builder(store.clone()).build();
        let ns = Namespace::new("tandem", "transactions");
        let answer = cancel(&coordinator, &store, &ns, id.as_str(), "test").await;
        match &answer {
            Err(Failure::Refused(m)) => assert!(
                m.contains("finished by this command"),
                "only the command touched the record: {m}"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// `cancel` of a transaction whose owner finishes it while the command
    /// runs (after the command read the record `pending`, before it asked
    /// to cancel) says what happened: it said the command had finished it,
    /// when the command had done nothing and the owner had.
    #[tokio::test]
    async fn cancel_does_not_claim_what_the_owner_finished() {
        let (store, _clock, _) = two_accounts().await;
        let (run, owner_pause) = owner_paused_after_applies(&store).await;
        // The command reads the record (`pending`), then stops before its
        // own first request.
        let cli_store = FaultStore::new(Arc::new(store.clone()));
        let cli_pause = cli_store.pause_at(1);
        let coordinator = Coordinator::builder(cli_store).build();
        let command = {
            let store = store.clone();
            tokio::spawn(async move {
                let ns = Namespace::new("tandem", "transactions");
                cancel(&coordinator, &store, &ns, "pay-1", "test").await
            })
        };
        cli_pause.reached.await.unwrap();
        // The owner finishes its transaction.
        owner_pause.release.send(()).unwrap();
        let receipt = run.await.unwrap().unwrap();
        assert_eq!(receipt.state, TxState::Done);
        cli_pause.release.send(()).unwrap();
        let answer = command.await.unwrap();
        match &answer {
            Err(Failure::Refused(m)) => assert!(
                !m.contains("by this command"),
                "the command did nothing, the owner finished it: {m}"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// A transaction this run claimed is its own, not one "left alone
    /// inside its owner's lease"; one of another owner inside its lease is.
    #[test]
    fn records_left_are_told_apart_by_owner_and_lease() {
        let record = |owner: &str, modified: i64| {
            tandem::TxRecord::from_document(doc! {
                "_id": format!("t-{owner}-{modified}"), "state": "pending", "epoch": 0_i64,
                "owner": owner, "leaseMillis": 30_000_i64, "token": "k",
                "participants": [],
                "lastModified": bson::DateTime::from_millis(modified),
                "leaseStart": bson::DateTime::from_millis(modified),
                "history": [],
            })
            .unwrap()
        };
        let now = bson::DateTime::from_millis(100_000);
        let left = NotDue::of(
            vec![
                record("me", 90_000),
                record("other", 90_000),
                record("other", 69_000),
                record("other", 10_000),
                record("other", 5_000),
            ],
            "me",
            now,
            2_000,
        );
        assert_eq!(
            left,
            NotDue {
                mine: 1,
                mine_until: Some(bson::DateTime::from_millis(122_000)),
                leased: 1,
                leased_until: Some(bson::DateTime::from_millis(122_000)),
                in_margin: 1,
                margin_until: Some(bson::DateTime::from_millis(101_000)),
                due: 2,
                due_since: Some(bson::DateTime::from_millis(42_000)),
            }
        );
    }
}

/// `tandem gc` and `tandem recover` while the application runs: a command
/// must end once what was due when it started is done, not run for as long
/// as new records keep coming due.
#[cfg(test)]
mod commands_under_load {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use bson::doc;
    use tandem::testing::FaultStore;
    use tandem::{CommitPoint, Coordinator, DocumentChange, Namespace, Store, Transaction};

    use super::{gc, recover};

    const LEASE: Duration = Duration::from_secs(30);
    const MARGIN: Duration = Duration::from_secs(2);
    /// Transactions the application finishes while the command runs.
    const TRAFFIC: usize = 200;

    /// A memory store on a manual clock with accounts `A` and `B`.
    async fn accounts_a_and_b() -> (tandem::MemoryStore, Arc<tandem::ManualClock>) {
        let clock = Arc::new(tandem::ManualClock::default());
        let store = tandem::MemoryStore::with_clock(clock.clone());
        for id in ["A", "B"] {
            store
                .insert_one(&accounts(), doc! { "_id": id, "balance": 1_000_000_i64 })
                .await
                .unwrap();
        }
        (store, clock)
    }

    fn accounts() -> Namespace {
        Namespace::new("bank", "accounts")
    }

    /// One unit from `A` to `B`.
    fn transfer() -> Transaction {
        Transaction::new()
            .change(DocumentChange::update(accounts(), "A").inc("balance", -1_i64))
            .change(DocumentChange::update(accounts(), "B").inc("balance", 1_i64))
    }

    /// The ids of the documents of `ns`.
    async fn ids(store: &tandem::MemoryStore, ns: &Namespace) -> Vec<bson::Bson> {
        store
            .find(ns, doc! {}, Default::default())
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.get("_id").unwrap().clone())
            .collect()
    }

    /// The application commits a transfer, a lease plus the margin passes,
    /// and so on: every record it finished becomes due a moment later.
    /// `tandem gc` ran until the application stopped (a collection that
    /// removed something always went on to another), where it should stop
    /// after the records due at its start (here, ten) are collected.
    #[tokio::test]
    async fn gc_ends_while_transactions_keep_finishing() {
        let (store, clock) = accounts_a_and_b().await;
        let records = Namespace::new("tandem", "transactions");
        let app = Coordinator::builder(store.clone())
            .lease(LEASE)
            .clock_margin(MARGIN)
            .commit_point(CommitPoint::Done)
            .build();
        // Ten records due when the command starts.
        for _ in 0..10 {
            app.run(transfer()).await.unwrap();
        }
        clock.advance(LEASE + MARGIN + Duration::from_secs(1));
        let due_at_start = ids(&store, &records).await;
        assert_eq!(due_at_start.len(), 10);

        let finished = Arc::new(AtomicUsize::new(0));
        let traffic = {
            let finished = finished.clone();
            let clock = clock.clone();
            tokio::spawn(async move {
                for _ in 0..TRAFFIC {
                    app.run(transfer()).await.unwrap();
                    clock.advance(LEASE + MARGIN + Duration::from_secs(1));
                    finished.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            })
        };
        // The command's store lets the application run between its requests.
        let cli = Coordinator::builder(FaultStore::new(Arc::new(store.clone())).with_yields(7))
            .lease(LEASE)
            .clock_margin(MARGIN)
            .build();
        gc(&cli, LEASE + MARGIN, Duration::from_secs(1), false)
            .await
            .unwrap();
        let during = finished.load(Ordering::SeqCst);
        traffic.await.unwrap();
        let left = store
            .count(&records, doc! { "_id": { "$in": due_at_start } })
            .await
            .unwrap();
        assert_eq!(left, 0, "records due at the start were left");
        assert!(
            during < TRAFFIC,
            "`tandem gc` ran until the application stopped finishing transactions ({during} finished meanwhile)"
        );
    }

    /// The same for `tandem recover` while the application's coordinators
    /// keep dying after writing their records: each pass that finished
    /// something went on to another, so the command ran until the
    /// application stopped, where it should stop after the transactions
    /// due at its start (here, ten) are finished.
    #[tokio::test]
    async fn recover_ends_while_transactions_keep_coming_due() {
        let (store, clock) = accounts_a_and_b().await;
        let records = Namespace::new("tandem", "transactions");
        // An application process that dies after writing its record.
        let dying = {
            let store = store.clone();
            move || {
                Coordinator::builder(FaultStore::new(Arc::new(store.clone())).crash_after(1))
                    .lease(LEASE)
                    .clock_margin(MARGIN)
                    .retry(tandem::RetryPolicy::NONE)
                    .build()
            }
        };
        for _ in 0..10 {
            assert!(dying().run(transfer()).await.is_err());
        }
        clock.advance(LEASE + MARGIN + Duration::from_secs(1));
        let due_at_start = ids(&store, &records).await;
        assert_eq!(due_at_start.len(), 10);

        let started = Arc::new(AtomicUsize::new(0));
        let traffic = {
            let started = started.clone();
            let clock = clock.clone();
            tokio::spawn(async move {
                for _ in 0..TRAFFIC {
                    let _ = dying().run(transfer()).await;
                    clock.advance(LEASE + MARGIN + Duration::from_secs(1));
                    started.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            })
        };
        let cli = Coordinator::builder(FaultStore::new(Arc::new(store.clone())).with_yields(7))
            .lease(LEASE)
            .clock_margin(MARGIN)
            .build();
        let _ = recover(&cli, false, 1000).await;
        let during = started.load(Ordering::SeqCst);
        traffic.await.unwrap();
        let in_flight = store
            .count(
                &records,
                doc! { "_id": { "$in": due_at_start }, "state": { "$nin": ["done", "canceled"] } },
            )
            .await
            .unwrap();
        assert_eq!(in_flight, 0, "transactions due at the start were left");
        assert!(
            during < TRAFFIC,
            "`tandem recover` ran until the application stopped ({during} transactions came due meanwhile)"
        );
    }
}
