use serde::{Deserialize, Serialize};
use tandem::participant;

#[participant(collection = "profiles")]
#[derive(Serialize, Deserialize)]
struct Profile {
    #[serde(rename = "_id")]
    id: String,
    nick: Option<String>,
    score: Option<i64>,
}

fn main() {
    let _ = Profile::change("p")
        .set_nick("x".to_owned())
        .set_score(5)
        .require_nick_exists()
        .require_score_eq(None);
    let _ = Profile::change("p").unset_nick().require_score_missing();
    let _ = Profile::change("p").unset(Profile::fields().score());
}
