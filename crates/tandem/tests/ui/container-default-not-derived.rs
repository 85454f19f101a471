use serde::{Deserialize, Serialize};
use tandem::participant;

// The struct's own default, not derived (or a function's), may give an
// absent field `Some`: no presence guards.
#[participant(collection = "claims")]
#[derive(Serialize, Deserialize)]
#[serde(default)]
struct Claim {
    #[serde(rename = "_id")]
    id: String,
    approved_by: Option<String>,
}

impl Default for Claim {
    fn default() -> Self {
        Claim {
            id: String::new(),
            approved_by: Some("system".into()),
        }
    }
}

#[participant(collection = "grants")]
#[derive(Default, Serialize, Deserialize)]
#[serde(default = "Grant::fresh")]
struct Grant {
    #[serde(rename = "_id")]
    id: String,
    note: Option<String>,
}

impl Grant {
    fn fresh() -> Self {
        Grant {
            id: String::new(),
            note: Some("new".into()),
        }
    }
}

fn main() {
    let _ = Claim::change("C").require_approved_by_exists();
    let _ = Grant::change("G").require_note_missing();
    // Still there.
    let _ = Claim::change("C").unset_approved_by();
}
