//! How records are printed: a table, a detailed view, or JSON.

use std::fmt::Write;
use std::time::Duration;

use tandem::TxRecord;

use crate::duration;

/// How long the record has gone unchanged at `now` (by the store's clock).
pub fn age(record: &TxRecord, now: bson::DateTime) -> Option<Duration> {
    let since = record.last_modified?;
    let ms = now
        .timestamp_millis()
        .saturating_sub(since.timestamp_millis());
    Some(Duration::from_millis(ms.max(0) as u64))
}

/// A record as relaxed extended JSON.
pub fn record_json(record: &TxRecord) -> serde_json::Value {
    match record.to_document() {
        Ok(doc) => bson::Bson::Document(doc).into_relaxed_extjson(),
        Err(e) => serde_json::json!({ "_id": record.id.as_str(), "error": e.to_string() }),
    }
}

/// Prints pretty JSON on stdout.
pub fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("\"{e}\""))
    );
}

/// One line per record.
pub fn table(records: &[TxRecord], now: bson::DateTime) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<26} {:<10} {:>5} {:>12}  {:<5} OWNER",
        "ID", "STATE", "EPOCH", "UNCHANGED", "PARTS"
    );
    for r in records {
        let unchanged = age(r, now)
            .map(duration::render)
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            out,
            "{:<26} {:<10} {:>5} {:>12}  {:<5} {}",
            r.id.as_str(),
            r.state.as_str(),
            r.epoch,
            unchanged,
            r.participants.len(),
            r.owner
        );
    }
    let _ = writeln!(out, "{} transaction(s)", records.len());
    out
}

/// Everything about one record.
pub fn details(r: &TxRecord, documents: &[String]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "transaction {}", r.id);
    let _ = writeln!(out, "  state:         {}", r.state);
    let _ = writeln!(out, "  owner:         {} (epoch {})", r.owner, r.epoch);
    let _ = writeln!(
        out,
        "  lease:         {}",
        duration::render(Duration::from_millis(r.lease_millis.max(0) as u64))
    );
    let show = |t: Option<bson::DateTime>| t.map(|t| t.to_string()).unwrap_or_else(|| "-".into());
    let _ = writeln!(out, "  created:       {}", show(r.created));
    let _ = writeln!(out, "  last modified: {}", show(r.last_modified));
    if let Some(f) = r.finished_at {
        let _ = writeln!(out, "  finished:      {f}");
    }
    let _ = writeln!(out, "  attempts:      {}", r.attempts);
    if let Some(e) = &r.last_error {
        let _ = writeln!(out, "  last error:    {e}");
    }
    if let Some(until) = r.stub_until {
        let _ = writeln!(
            out,
            "  stub until:    {until} (garbage collection removed its participants and history; the id stays taken until then)"
        );
    }
    if r.native {
        let _ = writeln!(
            out,
            "  strategy:      native (its changes are not recorded)"
        );
    }
    let _ = writeln!(out, "participants:");
    for (i, p) in r.participants.iter().enumerate() {
        let _ = writeln!(out, "  {}. {} ({})", i + 1, p.label, p.kind);
        let spec = bson::Bson::Document(p.spec.clone()).into_relaxed_extjson();
        let _ = writeln!(out, "     change: {spec}");
        if let Some(before) = &p.before {
            let before = bson::Bson::Document(before.clone()).into_relaxed_extjson();
            let _ = writeln!(out, "     before: {before}");
        }
        if let Some(d) = documents.get(i) {
            let _ = writeln!(out, "     document: {d}");
        }
    }
    let _ = writeln!(out, "history:");
    for h in &r.history {
        let _ = writeln!(
            out,
            "  {:<6} {:<10} by {} (epoch {})",
            h.event,
            h.state.as_str(),
            h.owner,
            h.epoch
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `show` says what a record no longer holds: a stub's participants and
    /// history were removed by garbage collection, and a native record
    /// never recorded its changes (both printed an empty list without a word).
    #[test]
    fn details_say_what_a_record_does_not_hold() {
        let at = bson::DateTime::from_millis(1_700_000_000_000);
        let record = TxRecord::from_document(bson::doc! {
            "_id": "pay-1", "state": "done", "owner": "app", "epoch": 0_i64,
            "leaseMillis": 30_000_i64, "attempts": 0, "participants": [], "history": [],
            "keyed": true, "native": true, "stubUntil": at,
        })
        .unwrap();
        let text = details(&record, &[]);
        assert!(text.contains("stub until:"), "{text}");
        assert!(text.contains("native"), "{text}");
        let plain = TxRecord::from_document(bson::doc! {
            "_id": "t-1", "state": "done", "owner": "app", "epoch": 0_i64,
            "leaseMillis": 30_000_i64, "attempts": 0, "participants": [], "history": [],
        })
        .unwrap();
        let text = details(&plain, &[]);
        assert!(!text.contains("stub") && !text.contains("native"), "{text}");
    }
}
