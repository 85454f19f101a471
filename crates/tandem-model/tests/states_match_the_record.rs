//! The model's transaction states are the record's: the same words, the same
//! terminal ones, and nothing the record has that the model leaves out but
//! `initial`, which the coordinator never writes.

use std::collections::BTreeSet;

use tandem_model::TxState as ModelState;

fn word(state: ModelState) -> String {
    format!("{state:?}").to_lowercase()
}

#[test]
fn the_model_states_are_the_records_but_initial() {
    let model: BTreeSet<String> = ModelState::ALL.into_iter().map(word).collect();
    let record: BTreeSet<String> = tandem::TxState::ALL
        .into_iter()
        .map(|s| s.as_str().to_owned())
        .filter(|s| s != "initial")
        .collect();
    assert_eq!(model, record);
    assert_eq!(ModelState::ALL.len(), tandem::TxState::ALL.len() - 1);
}

#[test]
fn the_same_states_are_terminal() {
    for state in ModelState::ALL {
        let record = tandem::TxState::ALL
            .into_iter()
            .find(|s| s.as_str() == word(state))
            .expect("a record state of the same word");
        assert_eq!(state.is_terminal(), record.is_terminal(), "{state:?}");
    }
}
