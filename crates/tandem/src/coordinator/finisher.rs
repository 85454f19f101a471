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

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use tokio::task::JoinHandle;

use super::Coordinator;
use crate::engine::Live;
use crate::{StepError, TxId};

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

/// Most committed transactions that may wait for the background finisher:
/// past it, [`Coordinator::run`] waits for room before it answers, so that
/// a finisher held up (a slow or unreachable store) holds up the callers
/// too, rather than its queue, and the records behind it, growing with the
/// load.
pub(super) const BACKLOG: usize = 16 * FINISH_BATCH;

/// Committed transactions waiting to be finished, and the one task that finishes them.
///
/// Transactions committed while the finisher is busy wait for its next round,
/// which finishes them all together: their moves to `applied` share one
/// statement, their clears one request per store and collection, and their
/// moves to `done` one statement with later rounds'.
#[derive(Default)]
pub(super) struct Background {
    /// Committed transactions not taken on yet, each with its number.
    waiting: Vec<(u64, Live)>,
    /// When each of `waiting` arrived, in the same order (for
    /// [`CoordinatorConfig::finish_delay`](crate::config::CoordinatorConfig::finish_delay)):
    /// those left over from a full round keep their own time.
    arrived: std::collections::VecDeque<tokio::time::Instant>,
    running: bool,
    /// The number the next committed transaction gets.
    next: u64,
    /// The numbers of the transactions handed over and not yet finished
    /// (or left to recovery), with their ids: what a drain waits for, and
    /// what a transaction of this coordinator meeting one of them on a
    /// document waits for ([`Coordinator::settle_own`]).
    unfinished: std::collections::BTreeMap<u64, TxId>,
    /// How many drains are waiting: while any is, finish what is waiting
    /// without delay.
    draining: usize,
    /// How many of `unfinished` were finished (or left to recovery) so far
    /// ([`Coordinator::finished_mark`]).
    finished_count: u64,
    /// The ids of the last [`BACKLOG`] of them, each with the count once it
    /// was finished: what tells a conflict with a transaction of ours that
    /// was finished since a step was sent from one with another process's
    /// ([`Coordinator::settle_own`]).
    recent: std::collections::VecDeque<(u64, TxId)>,
    finisher: Option<JoinHandle<()>>,
    /// How many finishers were started: the one `finisher` holds is the
    /// last.
    spawned: u64,
    /// Wakes a finisher waiting out its delay (a full round, or a drain).
    wake: Arc<tokio::sync::Notify>,
    /// Tells drains and callers waiting for room that transactions were
    /// taken on or finished, or that the finisher stopped.
    progress: Arc<tokio::sync::Notify>,
}

impl Background {
    /// Whether `holder` may be one of ours finished since the count was
    /// `since`: remembered so, or finished since and forgotten already.
    fn finished_since(&self, holder: &str, since: u64) -> bool {
        let forgotten = self
            .recent
            .front()
            .map_or(self.finished_count, |(count, _)| count - 1);
        since < forgotten
            || self
                .recent
                .iter()
                .rev()
                .take_while(|(count, _)| *count > since)
                .any(|(_, id)| id.as_str() == holder)
    }

    /// Whether a transaction id is one of `shared`'s unfinished
    /// transactions ([`Engine::own_unfinished`](crate::engine::Engine::own_unfinished)).
    pub(super) fn own_unfinished(shared: &Arc<Mutex<Background>>) -> crate::engine::OwnUnfinished {
        let shared = Arc::clone(shared);
        Arc::new(move |holder: &str| {
            let bg = shared.lock().unwrap_or_else(|e| e.into_inner());
            bg.unfinished.values().any(|id| id.as_str() == holder)
        })
    }

    /// Marks transactions `numbers` finished (or left to recovery).
    fn finished(&mut self, numbers: impl IntoIterator<Item = u64>) {
        for n in numbers {
            if let Some(id) = self.unfinished.remove(&n) {
                self.finished_count += 1;
                if self.recent.len() >= BACKLOG {
                    self.recent.pop_front();
                }
                self.recent.push_back((self.finished_count, id));
            }
        }
        self.progress.notify_waiters();
    }
}

/// Marks the finisher idle if its task ends by a panic its rounds did not
/// catch (a round's own panic, in a hand-written participant's step or an
/// event sink, leaves only that round to recovery): every committed transaction it had
/// not finished, and every one waiting for it, is left to recovery, which
/// finishes it after its lease; drains and callers waiting for room go on.
struct IdleOnPanic(Option<Arc<Mutex<Background>>>);

impl Drop for IdleOnPanic {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            let mut bg = shared.lock().unwrap_or_else(|e| e.into_inner());
            bg.running = false;
            for (_, live) in bg.waiting.drain(..) {
                tracing::warn!(target: "tandem", "finishing {} left to recovery: the finisher stopped", live.id);
            }
            bg.arrived.clear();
            let all: Vec<u64> = bg.unfinished.keys().copied().collect();
            bg.finished(all);
        }
    }
}

/// Counts a drain while it waits, and stops counting it however it ends
/// (finished, or its future dropped by a timeout).
struct Draining<'a>(&'a Coordinator);

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        self.0.background().draining -= 1;
    }
}

/// Waits for `notify`, registered before `ready` is checked, until `ready`
/// says so: no notification between the check and the wait is missed.
async fn wait_until(notify: Arc<tokio::sync::Notify>, mut ready: impl FnMut() -> bool) {
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if ready() {
            return;
        }
        notified.await;
    }
}

impl Coordinator {
    /// Waits until every transaction committed before the call is finished
    /// in the background (markers cleared, `done`), or left to recovery.
    /// Transactions committed meanwhile, by other tasks, do not hold it up.
    pub async fn drain(&self) {
        let (target, progress) = {
            let mut bg = self.background();
            let Some(target) = bg.next.checked_sub(1) else {
                return;
            };
            bg.draining += 1;
            bg.wake.notify_one();
            (target, Arc::clone(&bg.progress))
        };
        let _counted = Draining(self);
        wait_until(progress, || {
            let bg = self.background();
            bg.unfinished
                .first_key_value()
                .is_none_or(|(first, _)| *first > target)
        })
        .await;
    }

    /// A mark to take before sending steps whose conflicts
    /// [`settle_own`](Self::settle_own) may look at: how many of this
    /// coordinator's committed transactions had been finished (or left to
    /// recovery) by then.
    pub(super) fn finished_mark(&self) -> u64 {
        self.background().finished_count
    }

    /// For the holders of conflicts met by steps sent after `since` (a
    /// [`finished_mark`](Self::finished_mark)), whether each step is worth
    /// sending again: its holder is a committed transaction of this
    /// coordinator that its background finisher has not finished yet (then
    /// this waits until every such one is finished, its markers cleared, or
    /// left to recovery, waking the finisher as a drain does: a
    /// `finish_delay` is not waited out), or it is one of this
    /// coordinator's finished since `since` (its document may be free now;
    /// where more were finished since than are remembered, any holder may
    /// be). A transaction of this
    /// coordinator meeting such a marker on a document it changes would
    /// otherwise be refused as a conflict with a transaction already
    /// committed, its own caller's previous one.
    ///
    /// The holders are looked at together, before any is waited for: the
    /// finishing waited for at one finishes others with it.
    pub(super) async fn settle_own(&self, holders: &[Option<&str>], since: u64) -> Vec<bool> {
        let (again, numbers, progress) = {
            let mut bg = self.background();
            let mut numbers = Vec::new();
            let again: Vec<bool> = holders
                .iter()
                .map(|holder| {
                    let Some(holder) = holder else {
                        return false;
                    };
                    match bg.unfinished.iter().find(|(_, id)| id.as_str() == *holder) {
                        Some((number, _)) => {
                            numbers.push(*number);
                            true
                        }
                        None => bg.finished_since(holder, since),
                    }
                })
                .collect();
            if numbers.is_empty() {
                return again;
            }
            bg.draining += 1;
            bg.wake.notify_one();
            (again, numbers, Arc::clone(&bg.progress))
        };
        let _counted = Draining(self);
        wait_until(progress, || {
            let bg = self.background();
            numbers.iter().all(|n| !bg.unfinished.contains_key(n))
        })
        .await;
        again
    }

    /// For a change refused by a guard while committed transactions of
    /// this coordinator wait for their background finishing: waits until
    /// every one handed over before the call is finished (or left to
    /// recovery), waking the finisher as a drain does, and returns `true`
    /// if there was any. A credit to a shared document lands at its
    /// finishing, so a guard its caller's own committed credit makes true
    /// (a debit after a top-up) refuses until then.
    pub(super) async fn settle_all_own(&self) -> bool {
        if self.background().unfinished.is_empty() {
            return false;
        }
        self.drain().await;
        true
    }

    /// [`settle_conflicts`](Self::settle_conflicts)' counterpart for guards
    /// ([`settle_all_own`](Self::settle_all_own)): runs `again(i)` once for
    /// each of `results` refused by a guard, once this coordinator's own
    /// unfinished transactions are finished. Returns whether it sent any.
    pub(super) async fn settle_guards<T, F, Fut>(
        &self,
        results: &mut [Result<T, StepError>],
        again: F,
    ) -> bool
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<T, StepError>>,
    {
        let indexes: Vec<usize> = (0..results.len())
            .filter(|&i| matches!(results[i], Err(StepError::GuardFailed { .. })))
            .collect();
        if indexes.is_empty() || !self.settle_all_own().await {
            return false;
        }
        let redone = futures::future::join_all(indexes.iter().map(|&i| again(i))).await;
        for (i, result) in indexes.into_iter().zip(redone) {
            results[i] = result;
        }
        true
    }

    /// Runs `again(i)` for each of `results` refused as a conflict with a
    /// transaction of this coordinator's own ([`settle_own`](Self::settle_own);
    /// `since`: the [`finished_mark`](Self::finished_mark) taken before the
    /// steps of `results` were sent) once that one is finished, for up to
    /// [`SETTLE_ROUNDS`](super::two_phase::SETTLE_ROUNDS) rounds (each waits
    /// only for transactions committed before it). Returns how many rounds
    /// sent requests again.
    pub(super) async fn settle_conflicts<T, F, Fut>(
        &self,
        results: &mut [Result<T, StepError>],
        mut since: u64,
        again: F,
    ) -> u32
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<T, StepError>>,
    {
        let mut rounds = 0;
        for _ in 0..super::two_phase::SETTLE_ROUNDS {
            let holders: Vec<Option<&str>> = results
                .iter()
                .map(|result| match result {
                    Err(StepError::Conflict { holder, .. }) => Some(holder.as_str()),
                    _ => None,
                })
                .collect();
            let settled = self.settle_own(&holders, since).await;
            let indexes: Vec<usize> = (0..results.len()).filter(|&i| settled[i]).collect();
            if indexes.is_empty() {
                break;
            }
            rounds += 1;
            since = self.finished_mark();
            let redone = futures::future::join_all(indexes.iter().map(|&i| again(i))).await;
            for (i, result) in indexes.into_iter().zip(redone) {
                results[i] = result;
            }
        }
        rounds
    }

    fn background(&self) -> std::sync::MutexGuard<'_, Background> {
        self.background.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands a committed transaction to the background finisher, starting it
    /// if idle; waits for room first while [`BACKLOG`] transactions wait.
    pub(super) async fn finish_later(&self, live: Live) {
        let progress = Arc::clone(&self.background().progress);
        wait_until(progress, || {
            let bg = self.background();
            if bg.waiting.len() >= BACKLOG {
                bg.wake.notify_one();
                return false;
            }
            true
        })
        .await;
        let mut bg = self.background();
        let first = bg.waiting.is_empty();
        bg.arrived.push_back(tokio::time::Instant::now());
        let number = bg.next;
        bg.next += 1;
        bg.unfinished.insert(number, live.id.clone());
        bg.waiting.push((number, live));
        if bg.running {
            // A full round goes at once; so does the first of a round while
            // the finisher waits only for settled records' linger.
            if bg.waiting.len() >= FINISH_BATCH || first {
                bg.wake.notify_one();
            }
            return;
        }
        bg.running = true;
        bg.spawned += 1;
        let spawned = bg.spawned;
        let earlier = bg.finisher.take();
        // Spawned with the lock released: a task the runtime drops at once
        // (one shutting down) drops its guard, which takes the lock.
        drop(bg);
        let engine = Arc::clone(&self.engine);
        let shared = Arc::clone(&self.background);
        // The guard is made here and moved into the task, not made by the
        // task: a task dropped before it first runs (its runtime ended: a
        // runtime built per call, tests sharing a coordinator) leaves its
        // transactions to recovery and the finisher idle, as a panic does,
        // rather than marked running for good, with no finisher started
        // again and every drain, and every transaction waiting for its own
        // ([`settle_own`](Self::settle_own)), waiting forever.
        let idle = IdleOnPanic(Some(Arc::clone(&shared)));
        let handle = tokio::spawn(async move {
            let mut idle = idle;
            // The finisher before this one, if it is still ending, ends first.
            if let Some(h) = earlier {
                let _ = h.await;
            }
            let delay = engine.config.finish_delay;
            let linger = CLOSE_LINGER.min(engine.config.lease / 4);
            // Settled records waiting for their move to `done`, and since when.
            let mut settled: Vec<(u64, Live)> = Vec::new();
            let mut settled_since = tokio::time::Instant::now();
            loop {
                let (batch, wait) = {
                    let mut bg = shared.lock().unwrap_or_else(|e| e.into_inner());
                    if bg.waiting.is_empty() && settled.is_empty() {
                        bg.running = false;
                        bg.progress.notify_waiters();
                        idle.0 = None;
                        return;
                    }
                    let flush = bg.draining > 0;
                    let now = tokio::time::Instant::now();
                    let close_at = settled_since + linger;
                    let close = !settled.is_empty()
                        && (flush || settled.len() >= FINISH_BATCH || close_at <= now);
                    // When the oldest waiting transaction is due: its
                    // arrival plus the delay, or never by the clock where
                    // that is past what an instant holds (a delay of
                    // `Duration::MAX`): then only a drain or a full round
                    // takes it.
                    let oldest = bg.arrived.front().copied();
                    let settle_at = oldest.and_then(|t| t.checked_add(delay));
                    let due = oldest.is_some()
                        && (settle_at.is_some_and(|at| at <= now)
                            || flush
                            || bg.waiting.len() >= FINISH_BATCH);
                    let batch: Vec<(u64, Live)> = if due {
                        let n = bg.waiting.len().min(FINISH_BATCH);
                        let batch = bg.waiting.drain(..n).collect();
                        // Those left over keep their own arrival: their
                        // delay runs from their commit, not from this round.
                        bg.arrived.drain(..n);
                        // Room for callers waiting to hand theirs over.
                        bg.progress.notify_waiters();
                        batch
                    } else {
                        Vec::new()
                    };
                    let wait = (batch.is_empty() && !close).then(|| {
                        // Until the first of: the round's delay is over, the
                        // settled records' linger is over, a full round, a
                        // drain (`None`: no time, only a wake).
                        let mut at = settle_at;
                        if !settled.is_empty() {
                            at = Some(at.map_or(close_at, |at| at.min(close_at)));
                        }
                        (at, Arc::clone(&bg.wake))
                    });
                    (batch, wait)
                };
                if let Some((at, wake)) = wait {
                    let timer = async {
                        match at {
                            Some(at) => tokio::time::sleep_until(at).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        () = timer => {}
                        () = wake.notified() => {}
                    }
                    continue;
                }
                let mut left = Vec::new();
                if !batch.is_empty() {
                    let lives: Vec<&Live> = batch.iter().map(|(_, live)| live).collect();
                    // A panic (a hand-written participant's clear, an event
                    // sink) leaves this round to recovery, not the rounds after.
                    let Ok(results) = AssertUnwindSafe(engine.settle_many(&lives))
                        .catch_unwind()
                        .await
                    else {
                        for (number, live) in batch {
                            tracing::warn!(target: "tandem", "finishing {} left to recovery: the finisher's round panicked", live.id);
                            left.push(number);
                        }
                        shared
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .finished(left);
                        continue;
                    };
                    if settled.is_empty() {
                        settled_since = tokio::time::Instant::now();
                    }
                    for ((number, live), result) in batch.into_iter().zip(results) {
                        match result {
                            Ok(()) => settled.push((number, live)),
                            Err(e) => {
                                tracing::warn!(target: "tandem", "finishing {} left to recovery: {e}", live.id);
                                left.push(number);
                            }
                        }
                    }
                }
                // Checked after the round, so that a linger that ran out
                // while it settled is not stretched by a whole loop.
                let flush = shared.lock().unwrap_or_else(|e| e.into_inner()).draining > 0;
                let due = flush
                    || settled.len() >= FINISH_BATCH
                    || settled_since + linger <= tokio::time::Instant::now();
                if !settled.is_empty() && due {
                    let closing = std::mem::take(&mut settled);
                    for round in closing.chunks(FINISH_BATCH) {
                        let lives: Vec<&Live> = round.iter().map(|(_, live)| live).collect();
                        let which: Vec<usize> = (0..lives.len()).collect();
                        let Ok(results) = AssertUnwindSafe(engine.close_many(&lives, &which))
                            .catch_unwind()
                            .await
                        else {
                            tracing::warn!(target: "tandem", "moving {} record(s) to done left to recovery: the finisher's round panicked", lives.len());
                            continue;
                        };
                        for (t, result) in results {
                            if let Err(e) = result {
                                tracing::warn!(target: "tandem", "finishing {} left to recovery: {e}", lives[t].id);
                            }
                        }
                    }
                    left.extend(closing.iter().map(|(number, _)| *number));
                }
                if !left.is_empty() {
                    shared
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .finished(left);
                }
            }
        });
        let mut bg = self.background();
        // Kept for the next finisher to wait for, unless that one was
        // started already (this one had ended meanwhile).
        if bg.spawned == spawned {
            bg.finisher = Some(handle);
        }
    }
}
