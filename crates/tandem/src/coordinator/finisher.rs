//! The background finisher: finishes committed transactions (clears their
//! markers, moves them to `done`) in batches, after `run` has returned.

use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use super::Coordinator;
use crate::engine::Live;

/// Most transactions the background finisher takes on in one go.
const FINISH_BATCH: usize = 64;

/// Committed transactions waiting to be finished, and the one task that finishes them.
///
/// Transactions committed while the finisher is busy wait for its next round,
/// which finishes them all together: their clears share one request per
/// store and collection, and their moves to `done` one request.
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
        if bg.waiting.is_empty() {
            bg.oldest = Some(tokio::time::Instant::now());
        }
        bg.waiting.push(live);
        if bg.running {
            if bg.waiting.len() >= FINISH_BATCH {
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
            loop {
                let (batch, wait): (Vec<Live>, _) = {
                    let mut bg = shared.lock().unwrap_or_else(|e| e.into_inner());
                    if bg.waiting.is_empty() {
                        bg.running = false;
                        bg.flush = false;
                        idle.0 = None;
                        return;
                    }
                    let deadline = bg.oldest.map(|t| t + delay);
                    let now = tokio::time::Instant::now();
                    match deadline {
                        Some(at) if at > now && !bg.flush && bg.waiting.len() < FINISH_BATCH => {
                            (Vec::new(), Some((at, Arc::clone(&bg.wake))))
                        }
                        _ => {
                            let n = bg.waiting.len().min(FINISH_BATCH);
                            let batch = bg.waiting.drain(..n).collect();
                            bg.oldest = (!bg.waiting.is_empty()).then_some(now);
                            (batch, None)
                        }
                    }
                };
                if let Some((at, wake)) = wait {
                    // Until the delay is over, the round is full, or a drain asks.
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = wake.notified() => {}
                    }
                    continue;
                }
                let lives: Vec<&Live> = batch.iter().collect();
                for (live, result) in batch.iter().zip(engine.finish_applied_many(&lives).await) {
                    if let Err(e) = result {
                        tracing::warn!(target: "tandem", "finishing {} left to recovery: {e}", live.id);
                    }
                }
            }
        }));
    }
}
