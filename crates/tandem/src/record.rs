//! The transaction record and its state machine.
//!
//! ```text
//! (initial) ─► pending ──► applied ──► done
//!                 │
//!                 └──► canceling ──► canceled
//! ```
//!
//! The record lives in one collection of the coordinator's store (by default
//! `tandem.transactions`). Every change of state is a compare-and-set on the
//! expected state and the owner's epoch. tandem writes records as `pending`;
//! `initial` is there for records of the hand-written pattern, which recovery
//! removes.

use std::fmt;
use std::str::FromStr;

use bson::{Bson, Document};
use serde::{Deserialize, Serialize};

use crate::error::ChangeError;

/// A transaction id. Participants' marker arrays hold it tagged with its
/// record's creation token ([`TxId::marker`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TxId(String);

impl TxId {
    /// The longest id accepted, in bytes.
    pub const MAX_LEN: usize = 128;

    /// A new, unique id (a 24-digit hex ObjectId).
    pub fn generate() -> Self {
        TxId(bson::oid::ObjectId::new().to_hex())
    }

    /// An id chosen by the caller, e.g. an idempotency key. Fails if empty or too long.
    pub fn new(id: impl Into<String>) -> Result<Self, ChangeError> {
        let id = id.into();
        if id.is_empty() {
            return Err(ChangeError::InvalidId {
                id,
                reason: "empty",
            });
        }
        if id.len() > Self::MAX_LEN {
            return Err(ChangeError::InvalidId {
                id,
                reason: "longer than 128 bytes",
            });
        }
        Ok(TxId(id))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value this transaction puts in its participants' marker arrays and
    /// locks: `<id>#<tag>`, the tag being the first [`MARKER_TAG_LEN`]
    /// characters of the record's creation token (the id alone for a record
    /// without one, written before tokens existed).
    ///
    /// A transaction id may be used again once its record is collected (a
    /// caller's idempotency key after the idempotency window). The tag keeps
    /// the two transactions' markers apart, so a step of the first that
    /// arrives very late (its worker stalled all that time) never takes the
    /// second one's marker for its own.
    pub fn marker(&self, token: Option<&str>) -> TxId {
        match token {
            Some(token) if !token.is_empty() => {
                let tag: String = token.chars().take(MARKER_TAG_LEN).collect();
                TxId(format!("{}{MARKER_TAG_SEPARATOR}{tag}", self.0))
            }
            _ => self.clone(),
        }
    }

    /// The transaction id a marker value names: the value without its tag
    /// (see [`marker`](Self::marker)); an untagged value names itself.
    pub fn of_marker(value: &str) -> &str {
        match value.rsplit_once(MARKER_TAG_SEPARATOR) {
            Some((id, tag)) if !id.is_empty() && is_tag(tag) => id,
            _ => value,
        }
    }

    /// The marker of a transaction's participant `index` that changes a
    /// document an earlier participant changes too: `<marker>/<index>`.
    pub(crate) fn from_marker_parts(marker: &TxId, index: usize) -> TxId {
        TxId(format!("{}/{index}", marker.0))
    }

    /// A marker value as a record keeps it
    /// ([`ParticipantEntry::marker`]).
    pub(crate) fn from_marker_value(value: String) -> TxId {
        TxId(value)
    }
}

/// A marker's tag, possibly followed by `/<index>` (a participant's own
/// marker: see `TxId::from_marker_parts`).
fn is_tag(tag: &str) -> bool {
    let (tag, index) = match tag.split_once('/') {
        Some((tag, index)) => (tag, Some(index)),
        None => (tag, None),
    };
    tag.len() == MARKER_TAG_LEN
        && tag.bytes().all(|b| b.is_ascii_hexdigit())
        && index.is_none_or(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// How many characters of the creation token tag a marker (48 random bits).
pub const MARKER_TAG_LEN: usize = 12;

/// Between a transaction id and its tag in a marker value.
pub const MARKER_TAG_SEPARATOR: char = '#';

/// Whether a record stamped `created` was written at or after its create
/// deadline `create_by` (see [`TxRecord::is_inert`]).
pub(crate) fn written_late(
    created: Option<bson::DateTime>,
    create_by: Option<bson::DateTime>,
) -> bool {
    matches!((created, create_by), (Some(at), Some(by)) if at >= by)
}

/// A new creation token: 24 hex digits, random (the first twelve tag markers).
pub(crate) fn new_token() -> String {
    let random = crate::engine::random_u64;
    format!("{:016x}{:08x}", random(), random() as u32)
}

impl fmt::Display for TxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<TxId> for bson::Bson {
    fn from(id: TxId) -> Self {
        bson::Bson::String(id.0)
    }
}

/// The state of a transaction, stored as the classic tutorial's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TxState {
    /// Recorded; nothing applied yet.
    Initial,
    /// Participants are being applied.
    Pending,
    /// Every participant is applied: the commit point. Markers are being cleared.
    Applied,
    /// Committed and cleaned up.
    Done,
    /// Applied participants are being compensated.
    Canceling,
    /// Rolled back and cleaned up.
    Canceled,
}

impl TxState {
    /// Every state, in protocol order.
    pub const ALL: [TxState; 6] = [
        TxState::Initial,
        TxState::Pending,
        TxState::Applied,
        TxState::Done,
        TxState::Canceling,
        TxState::Canceled,
    ];

    /// The word stored in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            TxState::Initial => "initial",
            TxState::Pending => "pending",
            TxState::Applied => "applied",
            TxState::Done => "done",
            TxState::Canceling => "canceling",
            TxState::Canceled => "canceled",
        }
    }

    /// `done` or `canceled`.
    pub fn is_terminal(self) -> bool {
        matches!(self, TxState::Done | TxState::Canceled)
    }

    /// Whether the state machine allows moving from `self` to `to`.
    pub fn can_move_to(self, to: TxState) -> bool {
        use TxState::*;
        matches!(
            (self, to),
            (Initial, Pending)
                | (Pending, Applied)
                | (Pending, Canceling)
                | (Applied, Done)
                | (Canceling, Canceled)
        )
    }

    /// The states a record can be stuck in.
    pub fn in_flight() -> [TxState; 4] {
        [
            TxState::Initial,
            TxState::Pending,
            TxState::Applied,
            TxState::Canceling,
        ]
    }
}

impl fmt::Display for TxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an unknown state word.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown transaction state {0:?}")]
pub struct UnknownState(pub String);

impl FromStr for TxState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TxState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_owned()))
    }
}

impl From<TxState> for bson::Bson {
    fn from(s: TxState) -> Self {
        bson::Bson::String(s.as_str().to_owned())
    }
}

/// One participant as recorded: enough to rebuild it during recovery.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParticipantEntry {
    /// The registered kind that rebuilds it (`"document"` for document changes).
    pub kind: String,
    /// A readable label, e.g. `bank.accounts/A`.
    pub label: String,
    /// The participant's own specification.
    pub spec: Document,
    /// The before-image captured before anything was applied, if the participant needs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Document>,
    /// The marker this participant's steps carry when it is not the
    /// record's ([`TxRecord::marker`]): a change to a document an earlier
    /// participant changes too, through another store name
    /// (`<marker>/<index>`). Recorded rather than worked out again, so that
    /// a record written before such markers existed is finished as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marker: Option<String>,
    /// For a document change in a named store: the identity of that store
    /// as the coordinator that wrote the record had it (`storeUid`, read
    /// from the store's `tandem_store` collection). A process whose store
    /// under that name has another identity (another database registered
    /// under the same name) does not drive or tidy the record, and leaves
    /// it for one whose store is the recorded one. `None` for the default
    /// store, other kinds, and records written before identities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_uid: Option<String>,
}

/// How a history line noting an undo's conflict begins (see [`TxRecord::conflicts`]).
pub const CONFLICT_EVENT: &str = "overwritten";

/// One line of a record's history: who moved it to which state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The state reached, or the state claimed in.
    pub state: TxState,
    /// The worker.
    pub owner: String,
    /// The worker's epoch.
    pub epoch: i64,
    /// `"create"`, `"move"`, `"claim"`, `"overwritten …"` (an undo's
    /// conflict with a writer outside tandem), or `"cancel: <reason>"` (an
    /// operator's cancellation, with the reason given).
    pub event: String,
}

/// A transaction record as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TxRecord {
    /// The id.
    #[serde(rename = "_id")]
    pub id: TxId,
    /// The state.
    pub state: TxState,
    /// The participants, in the order they were declared.
    pub participants: Vec<ParticipantEntry>,
    /// The worker that owns the record now.
    pub owner: String,
    /// The fencing epoch: raised by one every time a worker claims the record.
    pub epoch: i64,
    /// How long the owner's lease lasts after `last_modified`, in milliseconds.
    pub lease_millis: i64,
    /// When the record was created, by the store's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bson::DateTime>,
    /// When the record last changed, by the store's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<bson::DateTime>,
    /// When it reached `done` or `canceled`, by the store's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<bson::DateTime>,
    /// The token of the last claim, so a repeated claim recognises its own success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_token: Option<String>,
    /// A random token written when the record is created: a coordinator whose
    /// write collided with an existing record of the same id recognises its own
    /// earlier attempt by it (owner names and ids alone may repeat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Whether the id was chosen by the caller (an idempotency key): such a
    /// record becomes a stub at garbage collection, kept for the
    /// idempotency window ([`RecoveryConfig::idempotency_window`](crate::RecoveryConfig::idempotency_window)).
    #[serde(default)]
    pub keyed: bool,
    /// For a keyed record: the idempotency window of the coordinator that
    /// wrote it ([`CoordinatorConfig::idempotency_window`](crate::CoordinatorConfig::idempotency_window)),
    /// in milliseconds. Garbage collection keeps the record's stub until
    /// the longer of this and its own window has passed since it finished.
    /// `None` on records written by an earlier version, and unkeyed ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_millis: Option<i64>,
    /// Whether the transaction commits at its applies: every participant
    /// can tell whether its apply landed ([`Participant::probes`](crate::Participant::probes)),
    /// so the coordinator answered as soon as every apply had (the record
    /// still `pending`), and recovery commits a `pending` record whose
    /// participants all hold its marker once no apply can land any more,
    /// rather than roll it back. Records written before this field existed
    /// commit at the move to `applied`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub early_commit: bool,
    /// Whether the transaction ran natively (a keyed one: its record is
    /// written in its native transaction when it commits, or after it when
    /// it is refused). Its changes are not recorded: `participants` is empty.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub native: bool,
    /// Set on the stub garbage collection leaves of a keyed record: its
    /// participants and history are gone, its id and state stay until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stub_until: Option<bson::DateTime>,
    /// The create's deadline: the records store's clock (as the coordinator
    /// estimated it) plus the lease, fixed before the first attempt to write
    /// the record. A record the store wrote at or after it ([`is_inert`](Self::is_inert))
    /// comes from a create that arrived late, possibly after the transaction
    /// finished and its record was collected: nothing of it is ever applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_by: Option<bson::DateTime>,
    /// When the current epoch began, by the store's clock: the record's creation
    /// or its last claim. The epoch's applies carry [`deadline`](Self::deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_start: Option<bson::DateTime>,
    /// Markers of this transaction may be removed from a document only once the
    /// clock of the document's store reads this time or later: it lies past the
    /// deadline of every earlier epoch (plus the clock margin), so no apply an
    /// earlier owner may still have in flight can land after the removal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<bson::DateTime>,
    /// How many times recovery claimed it: the claims that lengthen the lease
    /// of the next. An operator's cancel is not counted.
    #[serde(default)]
    pub attempts: i32,
    /// The last error that moved it toward cancellation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Who moved it where.
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
}

impl TxRecord {
    /// When the owner's lease ends, by the store's clock.
    pub fn lease_expires(&self) -> Option<bson::DateTime> {
        self.last_modified.map(|t| {
            bson::DateTime::from_millis(t.timestamp_millis().saturating_add(self.lease_millis))
        })
    }

    /// The deadline of the current epoch's applies: an apply carries it in its
    /// filter and lands only while the participant store's clock reads earlier.
    /// The lease's start plus its length; records written before deadlines
    /// existed count from their last change.
    pub fn deadline(&self) -> bson::DateTime {
        let start = self
            .lease_start
            .or(self.last_modified)
            .map(|t| t.timestamp_millis())
            .unwrap_or(0);
        bson::DateTime::from_millis(start.saturating_add(self.lease_millis))
    }

    /// The conflicts its undo met: participants whose fields a writer outside
    /// tandem changed after the apply, left as that writer set them
    /// ([`StepError::Overwritten`](crate::StepError::Overwritten)), as noted in
    /// the history (events starting with `overwritten`).
    pub fn conflicts(&self) -> Vec<&str> {
        self.history
            .iter()
            .filter(|h| h.event.starts_with(CONFLICT_EVENT))
            .map(|h| h.event.as_str())
            .collect()
    }

    /// The value its participants' markers hold: [`TxId::marker`] with its token.
    pub fn marker(&self) -> TxId {
        self.id.marker(self.token.as_deref())
    }

    /// Whether the record was written at or after its create deadline
    /// ([`create_by`](Self::create_by)): by a create that arrived late, which
    /// may repeat a transaction that already finished. Its owner never applies
    /// it and recovery cancels it without touching any document.
    pub fn is_inert(&self) -> bool {
        written_late(self.created, self.create_by)
    }

    /// What a run under the same id that meets this record is told of the
    /// run that took the id ([`TxError::Duplicate`](crate::TxError::Duplicate)'s
    /// `state`): its state, or `None` for an inert record, whose state
    /// (`canceled` once recovery saw it) is that of a late copy of a create
    /// and says nothing of the run that sent it, which may have committed
    /// under a live record since collected.
    pub fn state_for_duplicate(&self) -> Option<TxState> {
        (!self.is_inert()).then_some(self.state)
    }

    /// Whether the lease has ended at `now` (a time from the store's clock).
    pub fn lease_expired(&self, now: bson::DateTime) -> bool {
        match self.lease_expires() {
            Some(end) => end <= now,
            None => true,
        }
    }

    /// Reads a record from its stored form.
    pub fn from_document(mut doc: Document) -> Result<Self, bson::de::Error> {
        let [created, last_modified, finished_at, stub_until, create_by, lease_start, not_before] =
            take_dates(
                &mut doc,
                [
                    "created",
                    "lastModified",
                    "finishedAt",
                    "stubUntil",
                    "createBy",
                    "leaseStart",
                    "notBefore",
                ],
            );
        // The participants' documents are moved, not read field by field
        // (serde would rebuild each, key by key and date by date): an
        // empty document stands in while serde reads the rest.
        let mut documents = Vec::new();
        if let Some(Bson::Array(entries)) = doc.get_mut("participants") {
            for entry in entries {
                let Bson::Document(entry) = entry else {
                    documents.push((None, None));
                    continue;
                };
                let mut take = |key| match entry.get_mut(key) {
                    Some(Bson::Document(d)) => Some(std::mem::take(d)),
                    _ => None,
                };
                documents.push((take("spec"), take("before")));
            }
        }
        let mut record: Self = bson::from_document(doc)?;
        // Read in order, one entry per element.
        for (entry, (spec, before)) in record.participants.iter_mut().zip(documents) {
            if let Some(spec) = spec {
                entry.spec = spec;
            }
            if let Some(before) = before {
                entry.before = Some(before);
            }
        }
        record.created = created.or(record.created);
        record.last_modified = last_modified.or(record.last_modified);
        record.finished_at = finished_at.or(record.finished_at);
        record.stub_until = stub_until.or(record.stub_until);
        record.create_by = create_by.or(record.create_by);
        record.lease_start = lease_start.or(record.lease_start);
        record.not_before = not_before.or(record.not_before);
        Ok(record)
    }

    /// The stored form (without the store-assigned timestamps when they are unset).
    pub fn to_document(&self) -> Result<Document, bson::ser::Error> {
        bson::to_document(self)
    }
}

/// Takes the dates at `keys` out of `doc`, for fields of type
/// `Option<bson::DateTime>` read by serde from the rest: bson's serde
/// deserializer reads every date through its extended JSON form (a
/// document and a decimal string, built and parsed again), which cost a
/// record's read more than all its other fields. A value of another type
/// is left where it is, for serde to read (or refuse) as before. A date
/// taken leaves a null in its place, which such a field reads as `None`,
/// as it would a missing key: nulled in place, not removed, as removing a
/// key moves every later field of the document.
pub(crate) fn take_dates<const N: usize>(
    doc: &mut Document,
    keys: [&str; N],
) -> [Option<bson::DateTime>; N] {
    keys.map(|key| {
        let slot = doc.get_mut(key)?;
        let Bson::DateTime(date) = *slot else {
            return None;
        };
        *slot = Bson::Null;
        Some(date)
    })
}

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    fn with_dates() -> Document {
        let at = |ms| bson::DateTime::from_millis(ms);
        doc! {
            "_id": "t1", "state": "pending", "epoch": 2_i64, "owner": "a",
            "leaseMillis": 30_000_i64, "token": "k",
            "participants": [
                { "kind": "document", "label": "db.c/x", "spec": { "id": "x", "at": at(8) } },
                { "kind": "document", "label": "db.c/y", "spec": { "id": "y" },
                  "before": { "_id": "y", "n": 1_i64, "at": at(9) }, "marker": "m/1" },
            ],
            "created": at(1), "lastModified": at(2), "finishedAt": at(3), "stubUntil": at(4),
            "createBy": at(5), "leaseStart": at(6), "notBefore": at(7),
            "history": [{ "state": "pending", "owner": "a", "epoch": 0_i64, "event": "create" }],
        }
    }

    #[test]
    fn a_record_reads_its_dates_as_serde_does() {
        let direct = TxRecord::from_document(with_dates()).unwrap();
        let by_serde: TxRecord = bson::from_document(with_dates()).unwrap();
        assert_eq!(
            direct.to_document().unwrap(),
            by_serde.to_document().unwrap()
        );
        let dates = [
            direct.created,
            direct.last_modified,
            direct.finished_at,
            direct.stub_until,
            direct.create_by,
            direct.lease_start,
            direct.not_before,
        ];
        let expected: Vec<_> = (1..=7)
            .map(|ms| Some(bson::DateTime::from_millis(ms)))
            .collect();
        assert_eq!(dates.to_vec(), expected);
    }

    #[test]
    fn participants_keep_their_documents_and_bad_ones_are_refused() {
        let read = TxRecord::from_document(with_dates()).unwrap();
        let at = |ms| Bson::DateTime(bson::DateTime::from_millis(ms));
        assert_eq!(read.participants[0].spec, doc! { "id": "x", "at": at(8) });
        assert_eq!(read.participants[0].before, None);
        assert_eq!(read.participants[1].spec, doc! { "id": "y" });
        assert_eq!(
            read.participants[1].before,
            Some(doc! { "_id": "y", "n": 1_i64, "at": at(9) })
        );
        assert_eq!(read.participants[1].marker.as_deref(), Some("m/1"));
        for (key, value) in [("spec", Bson::from("x")), ("before", Bson::from(1))] {
            let mut doc = with_dates();
            let parts = doc.get_array_mut("participants").unwrap();
            parts[1].as_document_mut().unwrap().insert(key, value);
            assert!(TxRecord::from_document(doc).is_err(), "{key}");
        }
        let mut doc = with_dates();
        doc.get_array_mut("participants")
            .unwrap()
            .push(Bson::from(1));
        assert!(TxRecord::from_document(doc).is_err());
    }

    /// A date taken leaves a null where it was, the other fields in their
    /// places; a value of another type stays for serde.
    #[test]
    fn taken_dates_leave_nulls_in_place() {
        let mut doc = with_dates();
        doc.insert("createBy", "tomorrow");
        let keys: Vec<String> = doc.keys().cloned().collect();
        let [created, create_by, missing] =
            take_dates(&mut doc, ["created", "createBy", "nowhere"]);
        assert_eq!(created, Some(bson::DateTime::from_millis(1)));
        assert_eq!((create_by, missing), (None, None));
        assert_eq!(doc.keys().cloned().collect::<Vec<_>>(), keys);
        assert_eq!(doc.get("created"), Some(&Bson::Null));
        assert_eq!(doc.get("createBy"), Some(&Bson::from("tomorrow")));
        assert_eq!(
            doc.get("lastModified"),
            Some(&Bson::DateTime(bson::DateTime::from_millis(2)))
        );
    }

    #[test]
    fn a_date_field_holding_another_type_is_refused_and_null_reads_as_none() {
        let mut doc = with_dates();
        doc.insert("createBy", "tomorrow");
        let e = TxRecord::from_document(doc).unwrap_err();
        assert!(e.to_string().contains("DateTime"), "{e}");
        let mut doc = with_dates();
        doc.insert("notBefore", Bson::Null);
        doc.remove("leaseStart");
        let read = TxRecord::from_document(doc).unwrap();
        assert_eq!((read.not_before, read.lease_start), (None, None));
        assert_eq!(read.created, Some(bson::DateTime::from_millis(1)));
    }
}
