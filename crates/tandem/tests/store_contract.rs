//! The store contract (`tandem::testing::store_contract`) on the embedded
//! store: one test per case.

use tandem::testing::MemoryFactory;

/// Every case gets a new factory (a new manual clock); the embedded store
/// keeps nothing between cases.
async fn setup(_case: &'static str) -> Option<(MemoryFactory, String)> {
    Some((MemoryFactory::new(), "contract".to_string()))
}

tandem::store_contract_tests!(setup);
