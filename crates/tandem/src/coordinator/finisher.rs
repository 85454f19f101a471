//! The background finisher: finishes committed transactions (clears their
//! markers, moves them to `done`) in batches, after `run` has returned.
//!
//! A round moves the records still `pending` to `applied` and clears their
//! markers. Their moves to `done` wait to share one statement with later
//! rounds' (until [`FINISH_BATCH`] records wait, [`CLOSE_LINGER`] has
//! passed, or a [`Coordinator::drain`]): a record that is `applied` with
//! every marker cleared is finished in all but name, and nothing reads the
//! difference in the meantime but recovery, which leaves a record alone
//! until its lease has run out.

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use super::Coordinator;
use crate::engine::Live;

/// Most transactions the background finisher takes on in one go, and most
/// records it moves to `done` in one statement.
const FINISH_BATCH: usize = crate::engine::ROUND;

/// How long a settled record (`applied`, markers cleared) may wait for its
/// move to `done` to share a statement with later ones (checked after each
/// round, so a round in progress may add to it); at most a quarter of the
/// lease, far below the time after which recovery takes a record on (if it
/// does, it finishes the record itself and the finisher's move finds it
/// moved).
const CLOSE_LINGER: std::time::Duration = std::time::Duration::from_millis(100);

/// Committed transactions waiting to be finished, and the one task that finishes them.
///
/// Transactions committed while the finisher is busy wait for its next round,
/// which finishes them all together: their moves to `applied` share one
/// statement, their clears one request per store and collection, and their
/// moves to `done` one statement with later rounds'.
#[derive(Default)]
pub(super) struct Background {
    waiting: Vec<Live>,
    /// When the oldest of `waiting` arrived (for
    /// [`CoordinatorConfig::finish_delay`](crate::config::CoordinatorConfig::finish_delay)).
    oldest: Option<tokio::time::Instant>,
    running: bool,
    /// Set by `drain`: finish what is waiting without delay.
    flush: bool,
    finisher: Option<JoinHandle<()>>,
    /// Wakes a finisher waiting out its delay (a full round, or a drain).
    wake: Arc<tokio::sync::Notify>,
}

/// Marks the finisher idle if its task ends by a panic, so that the next
/// commit starts a new one for whatever is still waiting.
struct IdleOnPanic(Option<Arc<Mutex<Background>>>);

impl Drop for IdleOnPanic {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            shared.lock().unwrap_or_else(|e| e.into_inner()).running = false;
        }
    }
}

impl Coordinator {
    /// Waits until every transaction committed so far is finished in the
    /// background (markers cleared, `done`), or left to recovery.
    pub async fn drain(&self) {
        let handle = {
            let mut bg = self.background();
            if bg.running {
                bg.flush = true;
                bg.wake.notify_one();
            }
            bg.finisher.take()
        };
        if let Some(h) = handle {
            let _ = h.await;
        }
    }

    fn background(&self) -> std::sync::MutexGuard<'_, Background> {
        self.background.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands a committed transaction to the background finisher, starting it if idle.
    pub(super) fn finish_later(&self, live: Live) {
        let mut bg = self.background();
        let first = bg.waiting.is_empty();
        if first {
            bg.oldest = Some(tokio::time::Instant::now());
        }
        bg.waiting.push(live);
        if bg.running {
            // A full round goes at once; so does the first of a round while
            // the finisher waits only for settled records' linger.
            if bg.waiting.len() >= FINISH_BATCH || first {
                bg.wake.notify_one();
            }
            return;
        }
        bg.running = true;
        let engine = Arc::clone(&self.engine);
        let shared = Arc::clone(&self.background);
        let earlier = bg.finisher.take();
        bg.finisher = Some(tokio::spawn(async move {
            // A drain that started before this finisher also waits for the one before it.
            if let Some(h) = earlier {
                let _ = h.await;
            }
            let mut idle = IdleOnPanic(Some(Arc::clone(&shared)));
            let delay = engine.config.finish_delay;
            let linger = CLOSE_LINGER.min(engine.config.lease / 4);
            // Settled records waiting for their move to `done`, and since when.
            let mut settled: Vec<Live> = Vec::new();
            let mut settled_since = tokio::time::Instant::now();
            loop {
                let (batch, wait) = {
                    let mut bg = shared.lock().unwrap_or_else(|e| e.into_inner());
                    if bg.waiting.is_empty() && settled.is_empty() {
                        bg.running = false;
                        bg.flush = false;
                        idle.0 = None;
                        return;
                    }
                    let now = tokio::time::Instant::now();
                    let close_at = settled_since + linger;
                    let close = !settled.is_empty()
                        && (bg.flush || settled.len() >= FINISH_BATCH || close_at <= now);
                    let settle_at = bg.oldest.map(|t| t + delay);
                    let batch: Vec<Live> = match settle_at {
                        Some(at) if (at <= now || bg.flush || bg.waiting.len() >= FINISH_BATCH) => {
                            let n = bg.waiting.len().min(FINISH_BATCH);
                            let batch = bg.waiting.drain(..n).collect();
                            bg.oldest = (!bg.waiting.is_empty()).then_some(now);
                            batch
                        }
                        _ => Vec::new(),
                    };
                    let wait = (batch.is_empty() && !close).then(|| {
                        // Until the first of: the round's delay is over, the
                        // settled records' linger is over, a full round, a drain.
                        let mut at = settle_at.unwrap_or(close_at);
                        if !settled.is_empty() {
                            at = at.min(close_at);
                        }
                        (at, Arc::clone(&bg.wake))
                    });
                    (batch, wait)
                };
                if let Some((at, wake)) = wait {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = wake.notified() => {}
                    }
                    continue;
                }
                if !batch.is_empty() {
                    let lives: Vec<&Live> = batch.iter().collect();
                    let results = engine.settle_many(&lives).await;
                    if settled.is_empty() {
                        settled_since = tokio::time::Instant::now();
                    }
                    for (live, result) in batch.into_iter().zip(results) {
                        match result {
                            Ok(()) => settled.push(live),
                            Err(e) => {
                                tracing::warn!(target: "tandem", "finishing {} left to recovery: {e}", live.id);
                            }
                        }
                    }
                }
                // Checked after the round, so that a linger that ran out
                // while it settled is not stretched by a whole loop.
                let flush = shared.lock().unwrap_or_else(|e| e.into_inner()).flush;
                let due = flush
                    || settled.len() >= FINISH_BATCH
                    || settled_since + linger <= tokio::time::Instant::now();
                if !settled.is_empty() && due {
                    let closing = std::mem::take(&mut settled);
                    for round in closing.chunks(FINISH_BATCH) {
                        let lives: Vec<&Live> = round.iter().collect();
                        let which: Vec<usize> = (0..lives.len()).collect();
                        for (t, result) in engine.close_many(&lives, &which).await {
                            if let Err(e) = result {
                                tracing::warn!(target: "tandem", "finishing {} left to recovery: {e}", lives[t].id);
                            }
                        }
                    }
                }
            }
        }));
    }
}
