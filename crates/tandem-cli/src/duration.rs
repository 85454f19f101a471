//! Human durations on the command line: `90s`, `15m`, `2h`, `7d`, `500ms`.

use std::time::Duration;

/// Parses `<number><unit>` with unit `ms`, `s`, `m`, `h` or `d`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit (use ms, s, m, h or d)"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let per = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s, m, h or d)"
            ))
        }
    };
    n.checked_mul(per)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long (at most {}s)", u64::MAX))
}

/// As [`parse`], refusing zero: for a lease or a pause between rounds.
pub fn positive(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d.is_zero() {
        return Err(format!("{text:?} must be longer than zero"));
    }
    Ok(d)
}

/// Renders a duration the way `parse` reads it, coarsely: `3h12m`, `45s`.
pub fn render(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{}ms", d.as_millis()),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse("7d"), Ok(Duration::from_secs(604_800)));
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        assert!(parse("10").unwrap_err().contains("no unit"));
        assert!(parse("m").unwrap_err().contains("whole number"));
        assert!(parse("3w").unwrap_err().contains("unknown unit"));
        // 5124095576030432 hours is more seconds than a u64 holds: refused,
        // not wrapped around to an hour.
        assert!(parse("5124095576030432h").unwrap_err().contains("too long"));
        assert!(parse("307445734561825861m")
            .unwrap_err()
            .contains("too long"));
        assert!(parse("213503982334602d").unwrap_err().contains("too long"));
        assert_eq!(
            parse("213503982334601d"),
            Ok(Duration::from_secs(213_503_982_334_601 * 86_400))
        );
        assert!(positive("0s").unwrap_err().contains("longer than zero"));
        assert!(positive("0ms").unwrap_err().contains("longer than zero"));
        assert_eq!(positive("1ms"), Ok(Duration::from_millis(1)));
    }

    #[test]
    fn renders_coarsely() {
        assert_eq!(render(Duration::from_secs(45)), "45s");
        assert_eq!(render(Duration::from_secs(3 * 3600 + 12 * 60)), "3h12m");
        assert_eq!(render(Duration::from_millis(7)), "7ms");
    }
}
