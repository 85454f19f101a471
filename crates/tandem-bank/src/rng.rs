//! [`Rng`]: a small seeded pseudo-random generator (splitmix64).
//!
//! The bank test derives every random choice (the nemesis plan, each worker's
//! transfers) from one seed, so a run can be repeated with `--seed`. The
//! interleaving of processes and the server's timing are not repeatable.

/// A splitmix64 generator: fast, seedable, good enough for picking test inputs.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// A generator for one stream of a run: `seed` mixed with the `stream` numbers
    /// (e.g. worker index and incarnation), so streams do not repeat each other.
    pub fn derive(seed: u64, stream: &[u64]) -> Self {
        let mut rng = Rng::new(seed);
        for &s in stream {
            let mixed = rng.next_u64() ^ s.wrapping_mul(0xA076_1D64_78BD_642F);
            rng = Rng::new(mixed);
        }
        rng
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is `0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Multiply-shift: unbiased enough for test inputs, and never a division by zero.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// An index into a slice of length `len` (which must not be empty).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// `true` with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A fair coin.
    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let a: Vec<u64> = (0..5).map(|_| Rng::new(7).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let mut x = Rng::derive(7, &[1, 2]);
        let mut y = Rng::derive(7, &[1, 2]);
        let mut z = Rng::derive(7, &[2, 1]);
        let (xs, ys, zs): (Vec<u64>, Vec<u64>, Vec<u64>) = (0..4)
            .map(|_| (x.next_u64(), y.next_u64(), z.next_u64()))
            .fold((vec![], vec![], vec![]), |mut acc, (a, b, c)| {
                acc.0.push(a);
                acc.1.push(b);
                acc.2.push(c);
                acc
            });
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut rng = Rng::new(42);
        for _ in 0..10_000 {
            let v = rng.range(1, 50);
            assert!((1..=50).contains(&v));
            assert!(rng.below(3) < 3);
        }
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.range(5, 5), 5);
    }
}
