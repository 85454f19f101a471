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
