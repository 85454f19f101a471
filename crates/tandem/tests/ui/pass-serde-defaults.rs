// Declarations whose typed changes follow what serde reads, and compile.
use serde::{Deserialize, Serialize};
use tandem::participant;

// The id gets no methods: a one-sided skip leaves it the id.
#[participant(collection = "accounts")]
#[derive(Serialize, Deserialize)]
struct Account {
    #[serde(rename = "_id", skip_deserializing)]
    id: String,
    balance: i64,
}

// A field's own plain `default` overrides the struct's: an absent field
// reads `None`, so the presence guards stay.
#[participant(collection = "notes")]
#[derive(Serialize, Deserialize)]
#[serde(default)]
struct Note {
    #[serde(rename = "_id")]
    id: String,
    #[serde(default)]
    note: Option<String>,
}

impl Default for Note {
    fn default() -> Self {
        Note {
            id: String::new(),
            note: Some("x".into()),
        }
    }
}

// A derived `Default` gives `None`: the presence guards stay.
#[participant(collection = "drafts")]
#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct Draft {
    #[serde(rename = "_id")]
    id: String,
    note: Option<String>,
}

fn main() {
    let _ = Account::change("A").inc_balance(1);
    let _ = Note::change("N").require_note_missing();
    let _ = Draft::change("D").require_note_exists();
}
