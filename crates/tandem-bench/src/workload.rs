//! The workload every variant runs: transfers of one unit between accounts of a pool.

use bson::{doc, Document};

/// The balance every account starts with: large enough that no debit is ever refused.
pub const START_BALANCE: i64 = 1_000_000_000;

/// The id of account number `i`.
pub fn account_id(i: usize) -> String {
    format!("acct-{i:05}")
}

/// A fresh account document, with the empty marker array the hand-written pattern expects.
pub fn account_doc(i: usize) -> Document {
    doc! { "_id": account_id(i), "balance": START_BALANCE, "pendingTransactions": [] }
}

/// The source and destination accounts of transfer number `n` in a pool of `pool`
/// accounts (at least 2): two different accounts, spread pseudo-randomly so that
/// concurrent transfers rarely touch the same document. Every variant uses the same
/// sequence, and the Node driver of Fawn computes the same pairs.
pub fn pair(n: u64, pool: usize) -> (usize, usize) {
    assert!(pool >= 2, "a transfer needs two accounts");
    let h = mix(n);
    let pool = pool as u64;
    let from = h % pool;
    let to = (from + 1 + (h >> 32) % (pool - 1)) % pool;
    (from as usize, to as usize)
}

/// The splitmix64 finaliser, written the same way in `node/fawn_bench.js` (with BigInt).
pub fn mix(n: u64) -> u64 {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_distinct_and_in_range() {
        for pool in [2, 3, 256] {
            for n in 0..2_000 {
                let (a, b) = pair(n, pool);
                assert!(a < pool && b < pool && a != b, "{n} {pool}: {a} {b}");
            }
        }
        // The exact values the Node side must reproduce.
        assert_eq!(mix(0), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn pairs_spread_over_the_pool() {
        let mut hits = vec![0_u32; 256];
        for n in 0..25_600 {
            let (a, b) = pair(n, 256);
            hits[a] += 1;
            hits[b] += 1;
        }
        assert!(hits.iter().all(|&h| h > 100 && h < 320), "{hits:?}");
    }
}
