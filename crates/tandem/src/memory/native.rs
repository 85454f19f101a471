//! Native transactions on a [`MemoryStore`]: every change under one lock.

use bson::Bson;

use super::storage::{Collections, Stored};
use super::{checked, collection, with_id_first, MemoryStore};
use crate::change::DocumentChange;
use crate::document::NativeCommand;
use crate::error::StepError;
use crate::query::update::apply_update;
use crate::query::Ctx;
use crate::store::{Namespace, StoreError, StoreErrorKind};

impl MemoryStore {
    /// A native transaction: every change under one lock, undone on the first refusal.
    pub(super) fn run_locked(&self, changes: &[DocumentChange]) -> Result<(), StepError> {
        let now = self.inner.clock.now();
        let cx = Ctx::at(Some(now));
        let mut data = self.lock();
        let mut undo: Vec<(Namespace, Bson, Option<Stored>)> = Vec::new();
        let result = changes.iter().try_for_each(|change| {
            let ns = &change.namespace;
            let failed = |e: StoreError| match e.kind {
                StoreErrorKind::TypeMismatch => StepError::TypeMismatch {
                    participant: change.label(),
                    path: change.refused_path(&e.message),
                    message: e.message,
                },
                StoreErrorKind::DocumentTooLarge => StepError::TooLarge {
                    participant: change.label(),
                },
                StoreErrorKind::Overflow => StepError::Overflow {
                    participant: change.label(),
                    message: e.message,
                },
                _ => StepError::Store {
                    participant: change.label(),
                    source: e,
                },
            };
            let refusal = |data: &Collections| {
                let current = data.get(ns).and_then(|c| c.get(&change.id)).cloned();
                change
                    .explain(current.as_ref(), None)
                    .and(Err(StepError::Conflict {
                        participant: change.label(),
                        holder: "(concurrent write)".into(),
                    }))
            };
            match change.native_command() {
                NativeCommand::Insert { doc, placeholder } => {
                    let doc = checked(with_id_first(doc)).map_err(failed)?;
                    // A placeholder of the `_id` is taken over.
                    let held = data
                        .get(ns)
                        .and_then(|c| c.matching(&placeholder, &cx).next().map(|_| ()));
                    cx.check().map_err(failed)?;
                    if held.is_some() {
                        let before = data.get_mut(ns).and_then(|c| c.remove(&change.id));
                        undo.push((ns.clone(), change.id.clone(), before));
                    }
                    if collection(&mut data, ns).insert_new(ns, doc).is_err() {
                        let current = data.get(ns).and_then(|c| c.get(&change.id));
                        return change.explain(current, None);
                    }
                    undo.push((ns.clone(), change.id.clone(), None));
                    Ok(())
                }
                NativeCommand::Update { filter, update } => {
                    let found = data
                        .get_mut(ns)
                        .and_then(|c| c.first_match_mut(&filter, &cx));
                    cx.check().map_err(failed)?;
                    let Some(stored) = found else {
                        return refusal(&data);
                    };
                    let mut next = stored.doc.clone();
                    apply_update(&mut next, &update, now, false).map_err(failed)?;
                    let next = checked(next).map_err(failed)?;
                    let before = std::mem::replace(stored, next);
                    undo.push((ns.clone(), change.id.clone(), Some(before)));
                    Ok(())
                }
                NativeCommand::Delete { filter } => {
                    let matched = data
                        .get(ns)
                        .and_then(|c| c.matching(&filter, &cx).next().is_some().then_some(()));
                    cx.check().map_err(failed)?;
                    if matched.is_none() {
                        return refusal(&data);
                    }
                    let before = data.get_mut(ns).and_then(|c| c.remove(&change.id));
                    undo.push((ns.clone(), change.id.clone(), before));
                    Ok(())
                }
            }
        });
        if result.is_err() {
            for (ns, id, before) in undo.into_iter().rev() {
                let coll = collection(&mut data, &ns);
                coll.remove(&id);
                if let Some(doc) = before {
                    // It was there a moment ago under the same lock: re-inserting cannot collide.
                    let _ = coll.insert_new(&ns, doc);
                }
            }
        }
        result
    }
}
