//! [`Monitor`]: counts the commands a client sends, through the driver's command events.

use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mongodb::event::command::CommandEvent;
use mongodb::event::EventHandler;

/// Counts commands on the wire, and "waves": commands sent while no other
/// command of the client was in flight.
///
/// For one transaction running alone, waves are its sequential round trips:
/// commands sent concurrently (tandem applies both accounts at once) overlap
/// and count as one wave. A wave counts once the command that began it is
/// answered: a command sent in the background the moment a call is ready
/// to return (tandem's finishing, on another worker thread) is no round
/// trip the call waited for, whichever of the two the runtime ran first.
#[derive(Debug, Default)]
pub struct Monitor {
    started: AtomicU64,
    in_flight: AtomicI64,
    waves: AtomicU64,
    /// The request ids of the commands that began a wave, until answered.
    opening: Mutex<HashSet<i32>>,
    trace: Mutex<Option<Vec<(String, Duration)>>>,
}

/// A snapshot of a [`Monitor`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Commands started.
    pub commands: u64,
    /// Commands started with no other command in flight, and answered.
    pub waves: u64,
}

impl std::ops::Sub for Counts {
    type Output = Counts;
    fn sub(self, rhs: Counts) -> Counts {
        Counts {
            commands: self.commands - rhs.commands,
            waves: self.waves - rhs.waves,
        }
    }
}

impl Monitor {
    /// A monitor at zero.
    pub fn new() -> Arc<Self> {
        Arc::new(Monitor::default())
    }

    /// The handler to put in `ClientOptions::command_event_handler`.
    pub fn handler(self: &Arc<Self>) -> EventHandler<CommandEvent> {
        let me = Arc::clone(self);
        EventHandler::callback(move |event: CommandEvent| match event {
            CommandEvent::Started(ev) => {
                me.started.fetch_add(1, Ordering::SeqCst);
                if me.in_flight.fetch_add(1, Ordering::SeqCst) == 0 {
                    me.opens(ev.request_id);
                }
            }
            CommandEvent::Succeeded(ev) => {
                me.answered(ev.request_id);
                me.in_flight.fetch_sub(1, Ordering::SeqCst);
                me.record(ev.command_name, ev.duration);
            }
            CommandEvent::Failed(ev) => {
                me.answered(ev.request_id);
                me.in_flight.fetch_sub(1, Ordering::SeqCst);
                me.record(format!("{} (failed)", ev.command_name), ev.duration);
            }
            _ => {}
        })
    }

    fn opens(&self, request: i32) {
        self.opening
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(request);
    }

    /// Counts the wave `request` began, if it began one.
    fn answered(&self, request: i32) {
        let opened = self
            .opening
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&request);
        if opened {
            self.waves.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn record(&self, name: String, took: Duration) {
        if let Some(trace) = self
            .trace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            trace.push((name, took));
        }
    }

    /// Starts recording each finished command's name and duration (as the driver measured it).
    pub fn start_trace(&self) {
        *self.trace.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    }

    /// Stops recording and returns what was recorded since [`start_trace`](Self::start_trace).
    pub fn take_trace(&self) -> Vec<(String, Duration)> {
        self.trace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default()
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        Counts {
            commands: self.started.load(Ordering::SeqCst),
            waves: self.waves.load(Ordering::SeqCst),
        }
    }
}
