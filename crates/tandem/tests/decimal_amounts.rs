//! Decimal128 amounts, the type MongoDB recommends for money: transfers
//! between Decimal128 balances commit, cancel and recover exactly (digits
//! and exponent), with a crash after any store operation; the type rules
//! that keep every undo exact refuse what they must, with either strategy.

use tandem::testing::{scenarios, MemoryFactory};

#[tokio::test]
async fn decimal_transfers_are_exact_through_a_crash_after_any_operation() {
    let covered = scenarios::decimal_transfers(&MemoryFactory::new(), "bank").await;
    // The run without a crash, then a crash after each of its operations.
    assert!(covered >= 7, "only {covered} runs");
}

mod typed {
    use bson::{doc, Decimal128};
    use serde::{Deserialize, Serialize};
    use tandem::{participant, CommitPoint, Coordinator, MemoryStore, Store, Transaction, TxError};

    #[participant(collection = "accounts")]
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Account {
        #[serde(rename = "_id")]
        id: String,
        balance: Decimal128,
    }

    fn d(text: &str) -> Decimal128 {
        text.parse().unwrap()
    }

    fn transfer(from: &str, to: &str, amount: &str) -> Transaction {
        let minus = format!("-{amount}");
        Transaction::new()
            .change(
                Account::change(from)
                    .inc_balance(d(&minus))
                    .require_balance_gte(d(amount)),
            )
            .change(Account::change(to).inc_balance(d(amount)))
    }

    /// A struct's `Decimal128` field gets `inc_` and ordered guards, as a
    /// number's does, and reads back what was written.
    #[tokio::test]
    async fn a_decimal_field_of_a_participant_struct_is_incremented_and_guarded() {
        let store = MemoryStore::new();
        for (id, balance) in [("A", "100.10"), ("B", "5.05")] {
            store
                .insert_one(
                    &tandem::Namespace::new("bank", "accounts"),
                    bson::to_document(&Account {
                        id: id.into(),
                        balance: d(balance),
                    })
                    .unwrap(),
                )
                .await
                .unwrap();
        }
        let coordinator = Coordinator::builder(store.clone())
            .database("bank")
            .commit_point(CommitPoint::Done)
            .build();
        coordinator
            .run(transfer("A", "B", "20.25"))
            .await
            .expect("commits");
        let refused = coordinator.run(transfer("A", "B", "79.86")).await;
        assert!(
            matches!(refused, Err(TxError::Canceled { .. })),
            "{refused:?}"
        );
        let read = |id: &'static str| {
            let store = store.clone();
            async move {
                let found = store
                    .find_one(
                        &tandem::Namespace::new("bank", "accounts"),
                        doc! { "_id": id },
                    )
                    .await
                    .unwrap()
                    .unwrap();
                bson::from_document::<Account>(found).unwrap().balance
            }
        };
        assert_eq!((read("A").await, read("B").await), (d("79.85"), d("25.30")));
    }
}
