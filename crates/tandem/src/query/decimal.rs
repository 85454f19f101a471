//! Exact comparison of numbers when a Decimal128 is among them.
//!
//! MongoDB compares a Decimal128 numerically and exactly with Int32, Int64
//! and Double (`Decimal128("1.0")` equals `1`; the decimal `0.1` is below
//! the double `0.1`). The store compares through an exact decimal form of
//! each number: its sign, its significant digits and the power of ten of
//! the last one. Every finite double is such a decimal (at most 767
//! significant digits), written out exactly by Rust's formatting with
//! enough precision. Only comparisons that meet a Decimal128 take this
//! path; decimal arithmetic is in `decimal_arith`.

use std::cmp::Ordering;

use bson::Bson;

/// A number in exact decimal form.
#[derive(Debug, PartialEq)]
pub(crate) enum Exact {
    /// Not a number: below every other number, equal to itself (as a double NaN).
    Nan,
    /// `-inf` (`true`) or `+inf`.
    Infinite(bool),
    /// `(-1)^negative × digits × 10^exponent`, `digits` without leading or
    /// trailing zeros (empty for zero, whose sign is ignored).
    Finite {
        negative: bool,
        digits: Vec<u8>,
        exponent: i64,
    },
}

impl Exact {
    /// The exact form of a numeric value; `None` for other values.
    pub(crate) fn of(v: &Bson) -> Option<Exact> {
        match v {
            Bson::Int32(i) => Some(Exact::integer(i128::from(*i))),
            Bson::Int64(i) => Some(Exact::integer(i128::from(*i))),
            Bson::Double(f) => Some(Exact::double(*f)),
            Bson::Decimal128(d) => Exact::parse(&d.to_string()),
            _ => None,
        }
    }

    fn integer(i: i128) -> Exact {
        let text = i.unsigned_abs().to_string();
        Exact::finite(i < 0, text.as_bytes(), 0)
    }

    fn double(f: f64) -> Exact {
        if f.is_nan() {
            return Exact::Nan;
        }
        if f.is_infinite() {
            return Exact::Infinite(f < 0.0);
        }
        // 767 digits after the point hold any double exactly.
        Exact::parse(&format!("{f:.800e}")).unwrap_or(Exact::Nan)
    }

    /// Reads `[-+]digits[.digits][E[-+]digits]`, `NaN`, `[-]Infinity`/`inf`.
    pub(crate) fn parse(text: &str) -> Option<Exact> {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text.strip_prefix('+').unwrap_or(text)),
        };
        let lower = rest.to_ascii_lowercase();
        if lower == "nan" {
            return Some(Exact::Nan);
        }
        if lower == "infinity" || lower == "inf" {
            return Some(Exact::Infinite(negative));
        }
        let (mantissa, exponent) = match rest.split_once(['E', 'e']) {
            Some((m, e)) => (m, e.parse::<i64>().ok()?),
            None => (rest, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        if (whole.is_empty() && fraction.is_empty())
            || !whole
                .bytes()
                .chain(fraction.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let digits: Vec<u8> = whole.bytes().chain(fraction.bytes()).collect();
        let scale = i64::try_from(fraction.len()).ok()?;
        Some(Exact::finite(negative, &digits, exponent - scale))
    }

    fn finite(negative: bool, digits: &[u8], exponent: i64) -> Exact {
        let start = digits
            .iter()
            .position(|&d| d != b'0')
            .unwrap_or(digits.len());
        let digits = &digits[start..];
        let end = digits.iter().rposition(|&d| d != b'0').map_or(0, |i| i + 1);
        let trailing = i64::try_from(digits.len() - end).unwrap_or(0);
        Exact::Finite {
            negative: negative && end > 0,
            digits: digits[..end].to_vec(),
            exponent: if end == 0 { 0 } else { exponent + trailing },
        }
    }

    /// The number as an `i64`, when it is an integer of that range.
    pub(crate) fn as_i64(&self) -> Option<i64> {
        let Exact::Finite {
            negative,
            digits,
            exponent,
        } = self
        else {
            return None;
        };
        if digits.is_empty() {
            return Some(0);
        }
        let zeros = usize::try_from(*exponent).ok()?;
        if digits.len() + zeros > 19 {
            return None;
        }
        let mut value: i128 = 0;
        for d in digits
            .iter()
            .copied()
            .chain(std::iter::repeat_n(b'0', zeros))
        {
            value = value * 10 + i128::from(d - b'0');
        }
        i64::try_from(if *negative { -value } else { value }).ok()
    }

    /// Whether it is a NaN.
    pub(crate) fn is_nan(&self) -> bool {
        matches!(self, Exact::Nan)
    }

    /// Whether it is zero (of either sign).
    pub(crate) fn is_zero(&self) -> bool {
        matches!(self, Exact::Finite { digits, .. } if digits.is_empty())
    }

    /// The number without its fractional part (toward zero); NaN and the
    /// infinities as they are.
    pub(crate) fn trunc(self) -> Exact {
        match self {
            Exact::Finite {
                negative,
                digits,
                exponent,
            } if exponent < 0 => {
                let whole = usize::try_from(-exponent)
                    .ok()
                    .and_then(|fraction| digits.len().checked_sub(fraction))
                    .unwrap_or(0);
                Exact::finite(negative, &digits[..whole], 0)
            }
            other => other,
        }
    }
}

/// Orders two exact numbers: NaN lowest (equal to itself), then by value.
pub(crate) fn cmp_exact(a: &Exact, b: &Exact) -> Ordering {
    use Exact::*;
    match (a, b) {
        (Nan, Nan) => Ordering::Equal,
        (Nan, _) => Ordering::Less,
        (_, Nan) => Ordering::Greater,
        (Infinite(x), Infinite(y)) => y.cmp(x),
        (Infinite(negative), _) => {
            if *negative {
                Ordering::Less
            } else {
                Ordering::Greater
            }
        }
        (_, Infinite(negative)) => {
            if *negative {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
        (
            Finite {
                negative: na,
                digits: da,
                exponent: ea,
            },
            Finite {
                negative: nb,
                digits: db,
                exponent: eb,
            },
        ) => {
            let sign = |negative: bool, digits: &[u8]| match (digits.is_empty(), negative) {
                (true, _) => 0,
                (false, true) => -1,
                (false, false) => 1,
            };
            let (sa, sb) = (sign(*na, da), sign(*nb, db));
            if sa != sb || sa == 0 {
                return sa.cmp(&sb);
            }
            let magnitude = cmp_magnitude(da, *ea, db, *eb);
            if sa < 0 {
                magnitude.reverse()
            } else {
                magnitude
            }
        }
    }
}

/// Compares `da × 10^ea` with `db × 10^eb`, both non-zero, digits normalized.
fn cmp_magnitude(da: &[u8], ea: i64, db: &[u8], eb: i64) -> Ordering {
    // The power of ten just above the leading digit.
    let top = |d: &[u8], e: i64| e + i64::try_from(d.len()).unwrap_or(i64::MAX);
    top(da, ea)
        .cmp(&top(db, eb))
        // Same leading position: digit by digit, a missing digit counting as 0;
        // normalized digits end in a non-zero, so the longer one is larger.
        .then_with(|| da.cmp(db))
}

/// Orders two numeric values exactly, when at least one is a Decimal128.
pub(crate) fn cmp_numbers_exactly(a: &Bson, b: &Bson) -> Option<Ordering> {
    Some(cmp_exact(&Exact::of(a)?, &Exact::of(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(text: &str) -> Bson {
        Bson::Decimal128(text.parse().expect("a decimal"))
    }

    #[test]
    fn decimals_compare_with_every_number_exactly() {
        let cases = [
            (dec("1.0"), Bson::Int32(1), Ordering::Equal),
            (dec("1.00"), dec("1"), Ordering::Equal),
            (dec("-0"), Bson::Double(0.0), Ordering::Equal),
            (dec("0.1"), Bson::Double(0.1), Ordering::Less),
            (
                dec("0.1000000000000000055511151231257827"),
                Bson::Double(0.1),
                Ordering::Less,
            ),
            (
                dec("0.1000000000000000055511151231257828"),
                Bson::Double(0.1),
                Ordering::Greater,
            ),
            (dec("2"), Bson::Int64(1), Ordering::Greater),
            (dec("-2"), Bson::Int64(-1), Ordering::Less),
            (
                dec("9223372036854775808"),
                Bson::Int64(i64::MAX),
                Ordering::Greater,
            ),
            (
                dec("-9223372036854775808"),
                Bson::Int64(i64::MIN),
                Ordering::Equal,
            ),
            (dec("1E+3"), Bson::Int32(1000), Ordering::Equal),
            (dec("1.5E-7"), Bson::Double(0.0), Ordering::Greater),
            (dec("NaN"), Bson::Double(f64::NAN), Ordering::Equal),
            (dec("NaN"), Bson::Int32(-5), Ordering::Less),
            (
                dec("Infinity"),
                Bson::Double(f64::INFINITY),
                Ordering::Equal,
            ),
            (dec("-Infinity"), Bson::Double(f64::MIN), Ordering::Less),
            (dec("123.45"), dec("123.450001"), Ordering::Less),
            (dec("0.99"), Bson::Int32(1), Ordering::Less),
        ];
        for (a, b, want) in cases {
            assert_eq!(cmp_numbers_exactly(&a, &b), Some(want), "{a} vs {b}");
            assert_eq!(
                cmp_numbers_exactly(&b, &a),
                Some(want.reverse()),
                "{b} vs {a}"
            );
        }
        assert_eq!(
            cmp_numbers_exactly(&dec("1"), &Bson::String("1".into())),
            None
        );
        let int = |b: &Bson| Exact::of(b).and_then(|e| e.as_i64());
        assert_eq!(int(&dec("3.0")), Some(3));
        assert_eq!(int(&dec("-9223372036854775808")), Some(i64::MIN));
        assert_eq!(int(&dec("9223372036854775808")), None);
        assert_eq!(int(&dec("1E+2")), Some(100));
        assert_eq!(int(&dec("0.5")), None);
        assert_eq!(int(&dec("-0")), Some(0));
    }
}
