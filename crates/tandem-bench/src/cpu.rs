//! Process CPU time, from `getrusage(RUSAGE_SELF)`.

use std::time::Duration;

/// User plus system CPU time used so far by this process, all threads together.
///
/// The benchmark reads it before and after a batch of transactions of one
/// variant and divides the difference by the batch size. Batches of different
/// variants never overlap, so the difference belongs to that variant (plus the
/// driver's idle background threads, which are negligible).
pub fn process_cpu() -> Duration {
    // SAFETY: `rusage` is plain old data; zeroed is a valid value, and
    // `getrusage` only writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a live `rusage`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return Duration::ZERO;
    }
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

fn timeval(t: libc::timeval) -> Duration {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let micros = u32::try_from(t.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        let before = process_cpu();
        let mut x = 0_u64;
        for i in 0..20_000_000_u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(process_cpu() > before);
    }
}
