//! A hand-written participant: a card payment at an outside gateway, made
//! idempotent by using the transaction's marker (its id tagged with its
//! record's creation token) as the idempotency key.
//!
//! apply = authorize (a hold on the card), clear marker = capture, compensate = void.
//! The gateway refuses an authorization whose key was voided, which fences a
//! late apply by history; document changes fence theirs by time instead
//! (`StepContext::deadline`), which a gateway that keeps voided keys forever
//! does not need.
//!
//! ```sh
//! cargo run --example service
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bson::{doc, Document};
use serde::{Deserialize, Serialize};
use tandem::{
    participant, ChangeError, CommitPoint, Coordinator, Participant, StepContext, StepError,
    Transaction, TxError, TxId,
};

// ANCHOR: gateway
/// What the gateway knows about one idempotency key.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Hold {
    Authorized(i64),
    Captured(i64),
    Voided,
}

/// A pretend payment gateway with the usual authorize / capture / void API.
#[derive(Debug, Default)]
struct Gateway {
    holds: Mutex<HashMap<String, Hold>>,
    limit: i64,
}

#[derive(Debug)]
enum Refusal {
    Declined,
    Voided,
}

impl Gateway {
    /// Places a hold, once per key; a voided key is never authorized again.
    fn authorize(&self, key: &str, amount: i64) -> Result<(), Refusal> {
        let mut holds = self.holds.lock().unwrap();
        match holds.get(key) {
            Some(Hold::Voided) => Err(Refusal::Voided),
            Some(_) => Ok(()),
            None if amount > self.limit => Err(Refusal::Declined),
            None => {
                holds.insert(key.to_owned(), Hold::Authorized(amount));
                Ok(())
            }
        }
    }

    /// The hold of the transaction `id`, whatever its key's tag.
    fn hold_of(&self, id: &TxId) -> Option<Hold> {
        let holds = self.holds.lock().unwrap();
        holds
            .iter()
            .find(|(key, _)| TxId::of_marker(key) == id.as_str())
            .map(|(_, hold)| *hold)
    }

    fn capture(&self, key: &str) {
        let mut holds = self.holds.lock().unwrap();
        if let Some(Hold::Authorized(a)) = holds.get(key).copied() {
            holds.insert(key.to_owned(), Hold::Captured(a));
        }
    }

    fn void(&self, key: &str) {
        let mut holds = self.holds.lock().unwrap();
        if !matches!(holds.get(key), Some(Hold::Captured(_))) {
            holds.insert(key.to_owned(), Hold::Voided);
        }
    }
}
// ANCHOR_END: gateway

// ANCHOR: participant
/// A card payment as a transaction participant.
#[derive(Debug)]
struct CardPayment {
    card: String,
    amount: i64,
    gateway: Arc<Gateway>,
}

const KIND: &str = "example.card-payment";

#[async_trait]
impl Participant for CardPayment {
    fn kind(&self) -> &str {
        KIND
    }
    fn spec(&self) -> Result<Document, ChangeError> {
        Ok(doc! { "card": &self.card, "amount": self.amount })
    }
    fn label(&self) -> String {
        format!("gateway/{}", self.card)
    }
    async fn apply(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        // The marker, not the bare id: a caller-chosen id is free again once
        // its record is collected, and the gateway would take a new payment
        // under it for the old one.
        match self.gateway.authorize(ctx.marker.as_str(), self.amount) {
            Ok(()) => Ok(()),
            Err(Refusal::Declined) => Err(StepError::Rejected {
                participant: self.label(),
                reason: "card declined".into(),
            }),
            Err(Refusal::Voided) => Err(StepError::Fenced {
                participant: self.label(),
            }),
        }
    }
    async fn compensate(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        self.gateway.void(ctx.marker.as_str());
        Ok(())
    }
    async fn clear_marker(&self, ctx: StepContext<'_>) -> Result<(), StepError> {
        self.gateway.capture(ctx.marker.as_str());
        Ok(())
    }
}
// ANCHOR_END: participant

#[participant(collection = "orders")]
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Order {
    #[serde(rename = "_id")]
    id: String,
    state: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The embedded store, or the MongoDB server at MONGODB_URI.
    let store = tandem_mongodb::store_from_env().await?;
    let db = std::env::var("TANDEM_DB").unwrap_or_else(|_| "tandem_demo".to_owned());
    println!("service demo on the {} store, database {db}", store.name());
    let gateway = Arc::new(Gateway {
        limit: 500,
        ..Gateway::default()
    });

    // ANCHOR: register
    let for_recovery = gateway.clone();
    let coordinator = Coordinator::builder_shared(store)
        .database(&db)
        .commit_point(CommitPoint::Done)
        .kind(KIND, move |spec| {
            let card = spec.get_str("card").map_err(|e| ChangeError::InvalidSpec {
                kind: KIND.into(),
                message: e.to_string(),
            })?;
            let amount = spec
                .get_i64("amount")
                .map_err(|e| ChangeError::InvalidSpec {
                    kind: KIND.into(),
                    message: e.to_string(),
                })?;
            Ok(Box::new(CardPayment {
                card: card.into(),
                amount,
                gateway: for_recovery.clone(),
            }) as Box<dyn Participant>)
        })
        .build();
    // ANCHOR_END: register

    // The orders as they were, written outside any transaction.
    for id in ["o-1", "o-2"] {
        let order = Order {
            id: id.into(),
            state: "new".into(),
        };
        Order::put(&coordinator, &order).await?;
    }

    let pay = |order: &str, amount: i64| {
        Transaction::new()
            .change(
                Order::change(order.to_owned())
                    .set_state("paid".to_owned())
                    .require_state_eq("new".to_owned()),
            )
            .participant(CardPayment {
                card: "4242".into(),
                amount,
                gateway: gateway.clone(),
            })
    };
    let ok = coordinator.run(pay("o-1", 120)).await?;
    println!("  o-1 paid: hold {:?}", gateway.hold_of(&ok.id));
    assert_eq!(gateway.hold_of(&ok.id), Some(Hold::Captured(120)));

    match coordinator.run(pay("o-2", 900)).await {
        Err(TxError::Canceled {
            id,
            cause,
            participant,
            undone,
        }) => {
            // `undone`: nothing is left applied (otherwise recovery finishes the undo).
            assert!(undone, "the undo met no failure");
            let by = participant.ok_or("a refusal names its participant")?;
            println!(
                "  o-2 rolled back: {cause} (participant #{} of the transaction); hold {:?}",
                by.index,
                gateway.hold_of(&id)
            );
            assert_eq!(by.label, cause.participant().unwrap_or_default());
            assert_eq!(gateway.hold_of(&id), Some(Hold::Voided));
        }
        other => return Err(format!("expected a decline, got {other:?}").into()),
    }
    let o2 = Order::get(&coordinator, "o-2").await?.ok_or("no order")?;
    assert_eq!(o2.state, "new");
    println!("  o-2 is still new");
    // Background work finished, connections closed, before `main` returns.
    coordinator.shutdown().await;
    Ok(())
}
