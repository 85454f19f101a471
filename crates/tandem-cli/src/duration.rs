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
    let secs = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s, m, h or d)"
            ))
        }
    };
    Ok(Duration::from_secs(secs))
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
    }

    #[test]
    fn renders_coarsely() {
        assert_eq!(render(Duration::from_secs(45)), "45s");
        assert_eq!(render(Duration::from_secs(3 * 3600 + 12 * 60)), "3h12m");
        assert_eq!(render(Duration::from_millis(7)), "7ms");
    }
}
