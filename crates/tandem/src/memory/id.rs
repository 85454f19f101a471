//! `_id`s as map keys: ordered by [`total_cmp`], and hashed consistently with it.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

use bson::Bson;

use crate::query::total_cmp;

/// An `_id` as a map key, ordered by [`total_cmp`].
#[derive(Clone, Debug)]
pub(super) struct IdKey(pub(super) Bson);

/// A view of an `_id` that both stored keys ([`IdKey`]) and borrowed
/// look-up values ([`IdRef`]) provide, so that a look-up needs no clone.
pub(super) trait IdView {
    fn id(&self) -> &Bson;
}

impl IdView for IdKey {
    fn id(&self) -> &Bson {
        &self.0
    }
}

/// A borrowed `_id` to look a document up with.
pub(super) struct IdRef<'a>(pub(super) &'a Bson);

impl IdView for IdRef<'_> {
    fn id(&self) -> &Bson {
        self.0
    }
}

impl<'a> Borrow<dyn IdView + 'a> for IdKey {
    fn borrow(&self) -> &(dyn IdView + 'a) {
        self
    }
}

impl PartialEq for dyn IdView + '_ {
    fn eq(&self, other: &Self) -> bool {
        total_cmp(self.id(), other.id()) == Ordering::Equal
    }
}

impl Eq for dyn IdView + '_ {}

impl PartialOrd for dyn IdView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn IdView + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        total_cmp(self.id(), other.id())
    }
}

impl PartialEq for IdKey {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for IdKey {}

impl PartialOrd for IdKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IdKey {
    fn cmp(&self, other: &Self) -> Ordering {
        total_cmp(&self.0, &other.0)
    }
}

impl Hash for dyn IdView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_bson(self.id(), state);
    }
}

impl Hash for IdKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_bson(&self.0, state);
    }
}

/// Hashes a value consistently with [`total_cmp`]: values it calls equal
/// (such as `Int32(1)` and `Double(1.0)`) hash alike.
pub(super) fn hash_bson<H: Hasher>(v: &Bson, state: &mut H) {
    // 2^63, exactly representable as f64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    match v {
        Bson::ObjectId(id) => state.write(&id.bytes()),
        Bson::String(s) | Bson::Symbol(s) => state.write(s.as_bytes()),
        Bson::Int32(i) => state.write_i64(i64::from(*i)),
        Bson::Int64(i) => state.write_i64(*i),
        Bson::Double(f) => {
            if f.is_nan() {
                state.write_u8(0);
            } else if f.fract() == 0.0 && *f >= -TWO_63 && *f < TWO_63 {
                // Integral and in range: hash as the equal integer (-0.0 too).
                state.write_i64(*f as i64);
            } else {
                state.write_u64(f.to_bits());
            }
        }
        Bson::Document(d) => {
            for (k, v) in d {
                state.write(k.as_bytes());
                hash_bson(v, state);
            }
        }
        Bson::Array(a) => {
            for v in a {
                hash_bson(v, state);
            }
        }
        Bson::Boolean(b) => state.write_u8(u8::from(*b)),
        Bson::DateTime(d) => state.write_i64(d.timestamp_millis()),
        Bson::Binary(b) => state.write(&b.bytes),
        // As the equal integer or double (`total_cmp` compares decimals
        // exactly with other numbers): a decimal that is an integer of the
        // 64-bit range hashes as it; any other as its nearest double, which an
        // equal double is.
        Bson::Decimal128(d) => match crate::query::Exact::of(v) {
            Some(exact) => match exact.as_i64() {
                Some(i) => state.write_i64(i),
                None => hash_bson(
                    &Bson::Double(d.to_string().parse().unwrap_or(f64::NAN)),
                    state,
                ),
            },
            None => state.write(&d.bytes()),
        },
        Bson::Timestamp(t) => {
            state.write_u32(t.time);
            state.write_u32(t.increment);
        }
        // Rare as `_id`s: equal values share the (constant) hash.
        _ => state.write_u8(1),
    }
}

/// The hasher of the store's maps, by namespace and by `_id`: foldhash's
/// quality variant with a fixed seed (the fast variant left ObjectId strings
/// in 1,695 of 4,096 buckets in one test run). This in-process store serves tests and embedded use, where hash
/// flooding by an adversary choosing `_id`s is not a concern, and speed is.
/// foldhash carries every input bit into the low bits of the hash, which the
/// hash table picks buckets by, so ObjectId strings, which differ only in
/// their last characters, still spread over the buckets.
pub(super) type IdBuildHasher = foldhash::quality::FixedState;
