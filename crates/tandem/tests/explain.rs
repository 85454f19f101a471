//! `Coordinator::explain`: the plan of a transaction before it runs.

mod common;

use common::*;
use tandem::{Coordinator, DocumentChange, Namespace, Strategy};

#[tokio::test]
async fn a_plan_says_what_each_participant_does_commits_and_undoes() {
    let (store, _, _) = bank(&["A", "B"], 1000).await;
    let coordinator = Coordinator::new(store.clone());
    let orders = Namespace::new("bank", "orders");
    let tx = transfer("A", "B", 100)
        .change(DocumentChange::insert(
            orders.clone(),
            "o-1",
            bson::doc! { "amount": 100 },
        ))
        .change(DocumentChange::delete(
            Namespace::new("bank", "carts"),
            "c-1",
        ));
    let plan = coordinator.explain(&tx);
    let text = plan.to_string();
    assert_eq!(plan.strategy, Strategy::TwoPhase, "{text}");
    assert!(text.contains("the coordinator's default"), "{text}");
    let debit = &plan.participants[0];
    assert_eq!(debit.holds, "shared");
    assert_eq!(debit.forward, ["add -100 to balance"]);
    assert_eq!(debit.undo, ["add 100 to balance"]);
    assert_eq!(debit.guards, ["balance >= 100"]);
    let credit = &plan.participants[1];
    assert_eq!(credit.at_commit, ["add 100 to balance"]);
    assert!(credit.undo[0].contains("never landed"), "{text}");
    let insert = &plan.participants[2];
    assert_eq!(insert.holds, "exclusively");
    assert!(insert.undo[0].contains("delete the document"), "{text}");
    let delete = &plan.participants[3];
    assert_eq!(delete.at_commit, ["delete the document"]);
    assert_eq!(
        plan.indexes,
        ["tandem.transactions {state: 1, lastModified: 1}"]
    );
    assert!(plan.mermaid().contains("pending --> applied"));
    // Nothing was written.
    assert!(store.documents(&records()).is_empty());

    // Without a coordinator: the same plan, with the default settings.
    let alone = tx.explain();
    assert_eq!(alone, plan, "{alone}");
    let undecided = transfer("A", "B", 1).strategy(Strategy::Auto).explain();
    assert_eq!(undecided.strategy, Strategy::Auto, "{undecided}");
    assert!(
        undecided.reason.contains("decided when it runs"),
        "{undecided}"
    );
    let native = transfer("A", "B", 1).strategy(Strategy::Native).explain();
    assert_eq!(native.reason, "asked for by the transaction");
    assert!(native.indexes.is_empty());

    let auto = coordinator.explain(&transfer("A", "B", 1).strategy(Strategy::Auto));
    assert_eq!(auto.strategy, Strategy::Native, "{auto}");
    assert!(auto.reason.contains("native transactions"), "{auto}");
    assert!(auto.mermaid().contains("committed"));
}

/// A change that names no database (a `#[participant]` type without `db`)
/// runs in the coordinator's default database, and the plan names it so:
/// it showed `.accounts/A`.
#[tokio::test]
async fn a_plan_names_the_default_database() {
    let (store, _, _) = bank(&["A"], 1000).await;
    let coordinator = Coordinator::builder(store).database("shop").build();
    let tx = tandem::Transaction::new()
        .change(DocumentChange::update(Namespace::new("", "accounts"), "A").inc("n", 1_i64))
        .change(DocumentChange::update(Namespace::new("bank", "accounts"), "B").inc("n", 1_i64));
    let plan = coordinator.explain(&tx);
    assert_eq!(plan.participants[0].label, "shop.accounts/A");
    assert_eq!(plan.participants[1].label, "bank.accounts/B");
    let plan = tx.explain();
    assert_eq!(plan.participants[0].label, "tandem.accounts/A");
}

/// A plan tells the conditions a change meets that its declaration does
/// not show: a shared double credit needs a double, a decimal or a missing
/// field; an `unset` of a field of a sub-document restores the
/// sub-document whole (up to 16 KiB), field order kept.
#[tokio::test]
async fn a_plan_tells_the_type_rule_and_the_sub_document_restored() {
    let accounts = Namespace::new("bank", "accounts");
    let plan = tandem::Transaction::new()
        .change(DocumentChange::update(accounts.clone(), "A").inc("balance", 2.5_f64))
        .change(DocumentChange::update(accounts.clone(), "B").unset("shipping.note"))
        .change(DocumentChange::update(accounts, "C").unset("note"))
        .explain();
    let credit = &plan.participants[0];
    assert!(
        credit.forward[0].contains("a double, a decimal or missing"),
        "{plan}"
    );
    assert_eq!(credit.at_commit, ["add 2.5 to balance"]);
    let nested = &plan.participants[1];
    assert!(
        nested.undo[0].starts_with("restore shipping (the sub-document holding shipping.note"),
        "{plan}"
    );
    let top = &plan.participants[2];
    assert_eq!(
        top.undo,
        ["restore note from the before-image, if it is still unset"]
    );
}
