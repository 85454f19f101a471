//! Decimal128 addition and subtraction, as MongoDB computes them.
//!
//! MongoDB adds decimals with IEEE 754-2008 decimal128 arithmetic (the
//! binary integer decimal encoding, rounding half to even), and so does this
//! module, on the bytes [`bson::Decimal128`] holds:
//!
//! * the exact sum is rounded to 34 significant digits, half to even;
//! * an exact sum keeps the smaller exponent of the two operands
//!   (`1.50 + 1` is `2.50`, `0.1 + 0.2` is `0.3`), or the exponent nearest
//!   it that 34 digits can hold; an inexact one has 34 digits;
//! * a sum past the largest exponent is clamped (its coefficient padded
//!   with zeros) when 34 digits hold it, else it overflows to an infinity;
//! * an exact zero is `+0` unless both operands are `-0`, with the smaller
//!   exponent (`1.0 - 1.00` is `0.00`);
//! * a NaN operand gives that NaN, made quiet (the first operand's, if
//!   both are); infinities add as IEEE says, and `Infinity - Infinity` is
//!   NaN.
//!
//! A coefficient past 34 digits (non-canonical) reads as zero, as MongoDB
//! reads it. An Int32 or an Int64 operand is the decimal of that integer
//! (exponent 0), as MongoDB converts it; a double is not an operand here
//! (MongoDB converts it to a decimal of 15 significant digits first).

use bson::{Bson, Decimal128};

/// Significant digits a decimal128 holds.
const PRECISION: usize = 34;
/// The largest coefficient, `10^34 - 1`.
const MAX_COEFFICIENT: u128 = 10_u128.pow(34) - 1;
/// The exponent bias of the encoding.
const BIAS: i32 = 6176;
/// The largest exponent (of the last digit of the coefficient).
const MAX_EXPONENT: i32 = 6111;
/// The sign bit.
const SIGN: u128 = 1 << 127;
/// A positive infinity (the sign bit clear).
const INFINITY: u128 = 0x78 << 120;
/// The quiet NaN an invalid operation gives.
const NAN: u128 = 0x7c << 120;
/// The bits of a NaN's payload.
const PAYLOAD: u128 = (1 << 110) - 1;

/// A decoded decimal128.
#[derive(Debug, Clone, Copy)]
enum Decoded {
    /// A NaN, with its bits.
    Nan(u128),
    /// `-inf` (`true`) or `+inf`.
    Infinite(bool),
    /// `(-1)^negative × coefficient × 10^exponent`.
    Finite {
        negative: bool,
        coefficient: u128,
        exponent: i32,
    },
}

fn decode(bits: u128) -> Decoded {
    let negative = bits & SIGN != 0;
    match (bits >> 122) & 0x1f {
        0x1f => return Decoded::Nan(bits),
        0x1e => return Decoded::Infinite(negative),
        _ => {}
    }
    let (biased, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
        // The second form holds a coefficient of at least 2^113, past
        // 34 digits: non-canonical, so zero.
        ((bits >> 111) & 0x3fff, 0)
    } else {
        let coefficient = bits & ((1 << 113) - 1);
        (
            (bits >> 113) & 0x3fff,
            if coefficient > MAX_COEFFICIENT {
                0
            } else {
                coefficient
            },
        )
    };
    Decoded::Finite {
        negative,
        coefficient,
        // 14 bits: the conversion cannot fail.
        exponent: i32::try_from(biased).unwrap_or(0) - BIAS,
    }
}

/// The bits of a finite decimal; `coefficient` of at most 34 digits and
/// `exponent` in range.
fn encode(negative: bool, coefficient: u128, exponent: i32) -> u128 {
    let biased = u128::try_from(exponent + BIAS).unwrap_or(0);
    (if negative { SIGN } else { 0 }) | (biased << 113) | coefficient
}

fn infinity(negative: bool) -> u128 {
    INFINITY | if negative { SIGN } else { 0 }
}

/// A NaN made quiet: its sign and payload kept (a payload past 33 digits
/// read as zero), the signalling bit and the unused bits cleared.
fn quiet(bits: u128) -> u128 {
    let payload = bits & PAYLOAD;
    let payload = if payload >= 10_u128.pow(33) {
        0
    } else {
        payload
    };
    (bits & (0x3f << 122)) | payload
}

/// `a + b`.
pub(crate) fn add(a: Decimal128, b: Decimal128) -> Decimal128 {
    let a = u128::from_le_bytes(a.bytes());
    let b = u128::from_le_bytes(b.bytes());
    Decimal128::from_bytes(add_bits(a, b).to_le_bytes())
}

/// `a - b`: `a` plus `b` negated (a NaN `b` as it is).
pub(crate) fn subtract(a: Decimal128, b: Decimal128) -> Decimal128 {
    let a = u128::from_le_bytes(a.bytes());
    let b = u128::from_le_bytes(b.bytes());
    let b = match decode(b) {
        Decoded::Nan(_) => b,
        _ => b ^ SIGN,
    };
    Decimal128::from_bytes(add_bits(a, b).to_le_bytes())
}

/// An Int32, Int64 or Decimal128 as a decimal (an integer exactly, with
/// exponent 0, as MongoDB converts it); `None` for anything else.
pub(crate) fn operand(v: &Bson) -> Option<Decimal128> {
    let integer = |i: i64| {
        let bits = encode(i < 0, u128::from(i.unsigned_abs()), 0);
        Decimal128::from_bytes(bits.to_le_bytes())
    };
    match v {
        Bson::Int32(i) => Some(integer(i64::from(*i))),
        Bson::Int64(i) => Some(integer(*i)),
        Bson::Decimal128(d) => Some(*d),
        _ => None,
    }
}

/// For a debit of `by` (a negative finite decimal), the lowest value a
/// field may hold for the `$inc` to leave it finite: `-MAX - by` (`MAX` the
/// largest decimal, `9.99…E+6144`), rounded up to a multiple of
/// `10^6111`, the spacing of decimals there, so that it is a decimal
/// itself and every value at or above it, debited, is at least `-MAX`
/// exactly (and so rounds to no infinity). Below it, the sum becomes
/// `-Infinity`, from which adding `by` back restores nothing. `None` for
/// any other amount.
pub(crate) fn debit_floor(by: Decimal128) -> Option<Decimal128> {
    let Decoded::Finite {
        negative: true,
        coefficient,
        exponent,
    } = decode(u128::from_le_bytes(by.bytes()))
    else {
        return None;
    };
    if coefficient == 0 {
        return None;
    }
    // `|by|` in units of `10^MAX_EXPONENT`, rounded up.
    let units = if exponent >= MAX_EXPONENT {
        let shift = u32::try_from(exponent - MAX_EXPONENT).ok()?;
        coefficient.checked_mul(10_u128.checked_pow(shift)?)?
    } else {
        match 10_u128.checked_pow(u32::try_from(MAX_EXPONENT - exponent).ok()?) {
            Some(unit) => coefficient.div_ceil(unit),
            // A unit past 38 digits is above any coefficient.
            None => 1,
        }
    };
    let floor = MAX_COEFFICIENT.checked_sub(units)?;
    Some(Decimal128::from_bytes(
        encode(true, floor, MAX_EXPONENT).to_le_bytes(),
    ))
}

/// `a + b` when one is a Decimal128 and the other a Decimal128, an Int32
/// or an Int64; `None` otherwise.
pub(crate) fn add_numbers(a: &Bson, b: &Bson) -> Option<Decimal128> {
    mixed(a, b).map(|(a, b)| add(a, b))
}

/// `a - b` when one is a Decimal128 and the other a Decimal128, an Int32
/// or an Int64; `None` otherwise.
pub(crate) fn subtract_numbers(a: &Bson, b: &Bson) -> Option<Decimal128> {
    mixed(a, b).map(|(a, b)| subtract(a, b))
}

/// Both as decimals, when at least one is a Decimal128 and both are
/// operands.
fn mixed(a: &Bson, b: &Bson) -> Option<(Decimal128, Decimal128)> {
    if !matches!(a, Bson::Decimal128(_)) && !matches!(b, Bson::Decimal128(_)) {
        return None;
    }
    Some((operand(a)?, operand(b)?))
}

fn add_bits(a: u128, b: u128) -> u128 {
    match (decode(a), decode(b)) {
        (Decoded::Nan(x), _) => quiet(x),
        (_, Decoded::Nan(y)) => quiet(y),
        (Decoded::Infinite(x), Decoded::Infinite(y)) if x != y => NAN,
        (Decoded::Infinite(negative), _) | (_, Decoded::Infinite(negative)) => infinity(negative),
        (
            Decoded::Finite {
                negative: na,
                coefficient: ca,
                exponent: ea,
            },
            Decoded::Finite {
                negative: nb,
                coefficient: cb,
                exponent: eb,
            },
        ) => {
            let exponent = ea.min(eb);
            // Both aligned on the smaller exponent, exactly, however far
            // apart the exponents are (at most 12287 digits).
            let a = digits(ca, ea - exponent);
            let b = digits(cb, eb - exponent);
            let (negative, magnitude) = if na == nb {
                (na, add_digits(&a, &b))
            } else {
                match cmp_digits(&a, &b) {
                    std::cmp::Ordering::Greater => (na, sub_digits(&a, &b)),
                    std::cmp::Ordering::Less => (nb, sub_digits(&b, &a)),
                    // An exact zero: positive, rounding half to even.
                    std::cmp::Ordering::Equal => (false, Vec::new()),
                }
            };
            round(negative, &magnitude, exponent)
        }
    }
}

/// The decimal digits of `coefficient × 10^shift`, least significant first,
/// without leading zeros (none at all for zero).
fn digits(coefficient: u128, shift: i32) -> Vec<u8> {
    if coefficient == 0 {
        return Vec::new();
    }
    let mut out = vec![0; usize::try_from(shift).unwrap_or(0)];
    let mut c = coefficient;
    while c > 0 {
        out.push(u8::try_from(c % 10).unwrap_or(0));
        c /= 10;
    }
    out
}

fn add_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len().max(b.len()) + 1);
    let mut carry = 0;
    for i in 0..a.len().max(b.len()) {
        let d = a.get(i).copied().unwrap_or(0) + b.get(i).copied().unwrap_or(0) + carry;
        out.push(d % 10);
        carry = d / 10;
    }
    if carry > 0 {
        out.push(carry);
    }
    out
}

/// `a - b`, `a` at least `b`, without leading zeros.
fn sub_digits(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0;
    for (i, &d) in a.iter().enumerate() {
        let take = b.get(i).copied().unwrap_or(0) + borrow;
        if d >= take {
            out.push(d - take);
            borrow = 0;
        } else {
            out.push(d + 10 - take);
            borrow = 1;
        }
    }
    while out.last() == Some(&0) {
        out.pop();
    }
    out
}

/// Compares two digit strings without leading zeros.
fn cmp_digits(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    a.len()
        .cmp(&b.len())
        .then_with(|| a.iter().rev().cmp(b.iter().rev()))
}

fn value_of(digits: &[u8]) -> u128 {
    digits
        .iter()
        .rev()
        .fold(0, |value, &d| value * 10 + u128::from(d))
}

/// The bits of `±magnitude × 10^exponent`: rounded to 34 digits half to
/// even, clamped into the exponent range or overflowing to an infinity.
fn round(negative: bool, magnitude: &[u8], mut exponent: i32) -> u128 {
    let mut coefficient = if magnitude.len() > PRECISION {
        let dropped = magnitude.len() - PRECISION;
        let kept = value_of(&magnitude[dropped..]);
        let first = magnitude[dropped - 1];
        let rest = magnitude[..dropped - 1].iter().any(|&d| d != 0);
        exponent = exponent.saturating_add(i32::try_from(dropped).unwrap_or(i32::MAX));
        let up = first > 5 || (first == 5 && (rest || kept % 2 == 1));
        if up && kept == MAX_COEFFICIENT {
            // 10^34: one digit too many, whose last is a zero.
            exponent = exponent.saturating_add(1);
            10_u128.pow(33)
        } else {
            kept + u128::from(up)
        }
    } else {
        value_of(magnitude)
    };
    if exponent > MAX_EXPONENT {
        if coefficient == 0 {
            exponent = MAX_EXPONENT;
        }
        // Fold down: pad the coefficient while 34 digits hold it.
        while exponent > MAX_EXPONENT && coefficient <= MAX_COEFFICIENT / 10 {
            coefficient *= 10;
            exponent -= 1;
        }
        if exponent > MAX_EXPONENT {
            return infinity(negative);
        }
    }
    encode(negative, coefficient, exponent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(text: &str) -> Decimal128 {
        text.parse().expect("a decimal")
    }

    fn bits(d: Decimal128) -> u128 {
        u128::from_le_bytes(d.bytes())
    }

    /// Asserts `a + b` (or `a - b`) has the bytes of `want`, its exponent
    /// included, and that addition is commutative.
    #[track_caller]
    fn check(a: &str, op: char, b: &str, want: &str) {
        let (x, y) = (dec(a), dec(b));
        let got = match op {
            '+' => add(x, y),
            _ => subtract(x, y),
        };
        assert_eq!(
            got.bytes(),
            dec(want).bytes(),
            "{a} {op} {b}: got {got}, want {want}"
        );
        if op == '+' {
            assert_eq!(add(y, x).bytes(), got.bytes(), "{b} + {a}");
        }
    }

    #[test]
    fn exact_sums_keep_the_smaller_exponent() {
        check("1.50", '+', "1", "2.50");
        check("0.1", '+', "0.2", "0.3");
        check("100.10", '-', "20.25", "79.85");
        check("20.25", '-', "100.10", "-79.85");
        check("1E+3", '+', "1", "1001");
        check("1E+3", '+', "1E+2", "1.1E+3");
        check("-5", '+', "2.000", "-3.000");
        check(
            "123456789012345678901234567890.1234",
            '+',
            "1",
            "123456789012345678901234567891.1234",
        );
        check("0.000", '+', "7", "7.000");
        check("0E+5", '+', "7", "7");
        check("0E-5", '+', "7", "7.00000");
    }

    #[test]
    fn inexact_sums_round_to_34_digits_half_to_even() {
        // 35 digits, the last a 5 exactly: to the even neighbour.
        check(
            "1000000000000000000000000000000000",
            '+',
            "0.5",
            "1000000000000000000000000000000000",
        );
        check(
            "1000000000000000000000000000000001",
            '+',
            "0.5",
            "1000000000000000000000000000000002",
        );
        // Past the half: up; below it: down.
        check(
            "1000000000000000000000000000000000",
            '+',
            "0.51",
            "1000000000000000000000000000000001",
        );
        check(
            "1000000000000000000000000000000000",
            '+',
            "0.49",
            "1000000000000000000000000000000000",
        );
        // The same below zero: half to even by magnitude.
        check(
            "-1000000000000000000000000000000001",
            '-',
            "0.5",
            "-1000000000000000000000000000000002",
        );
        // A carry past 34 digits: one digit fewer, the exponent one up.
        check(
            "9999999999999999999999999999999999",
            '+',
            "0.5",
            "1.000000000000000000000000000000000E+34",
        );
        // A huge gap: the small one only decides the rounding.
        check(
            "1E+30",
            '+',
            "1E-30",
            "1.000000000000000000000000000000000E+30",
        );
        check(
            "1E+30",
            '-',
            "1E-30",
            "1.000000000000000000000000000000000E+30",
        );
        check(
            "1000000000000000000000000000000000",
            '-',
            "0.06",
            "999999999999999999999999999999999.9",
        );
        check(
            "1E+6000",
            '+',
            "1E-6000",
            "1.000000000000000000000000000000000E+6000",
        );
        check(
            "5E+6000",
            '+',
            "-1E-6176",
            "5.000000000000000000000000000000000E+6000",
        );
        // An exact sum too long for its exponent: 34 digits, the exponent
        // nearest the smaller one.
        check(
            "1.000000000000000000000000000000000",
            '+',
            "9E+5",
            "900001.0000000000000000000000000000",
        );
    }

    #[test]
    fn overflow_gives_an_infinity_and_large_exponents_fold_down() {
        check(
            "9.999999999999999999999999999999999E+6144",
            '+',
            "1E+6111",
            "Infinity",
        );
        check(
            "-9.999999999999999999999999999999999E+6144",
            '-',
            "1E+6111",
            "-Infinity",
        );
        check("1E+6144", '+', "1E+6144", "2E+6144");
        // Just under overflow stays finite.
        check(
            "9.999999999999999999999999999999998E+6144",
            '+',
            "1E+6111",
            "9.999999999999999999999999999999999E+6144",
        );
        // Rounding up to 10^34 at the largest exponent overflows.
        check(
            "9.999999999999999999999999999999999E+6144",
            '+',
            "5E+6110",
            "Infinity",
        );
        // A zero at the largest exponent plus a small number.
        check("0E+6111", '+', "1", "1");
    }

    #[test]
    fn zeros_and_signs() {
        check("1.0", '-', "1.00", "0.00");
        check("-1.0", '+', "1.00", "0.00");
        check("5", '-', "5", "0");
        check("0", '+', "0", "0");
        check("-0", '+', "-0", "-0");
        check("-0", '+', "0", "0");
        check("0", '-', "0", "0");
        check("-0", '-', "0", "-0");
        check("-0.00", '+', "0E+3", "0.00");
        check("-0E+3", '+', "-0.0", "-0.0");
        check("-3", '+', "0", "-3");
        check("-0", '+', "3.5", "3.5");
    }

    #[test]
    fn nans_and_infinities() {
        let nan = bits(dec("NaN"));
        assert_eq!(bits(add(dec("NaN"), dec("1"))), nan);
        assert_eq!(bits(add(dec("1"), dec("NaN"))), nan);
        assert_eq!(bits(subtract(dec("1"), dec("NaN"))), nan);
        assert_eq!(bits(add(dec("Infinity"), dec("NaN"))), nan);
        // A signalling NaN comes out quiet.
        assert_eq!(bits(add(dec("sNaN"), dec("1"))), nan);
        assert_eq!(bits(add(dec("-sNaN"), dec("1"))), nan | SIGN);
        // A NaN's payload is kept, the first operand's first.
        let with_payload = |p: u128| Decimal128::from_bytes((nan | p).to_le_bytes());
        assert_eq!(
            bits(add(with_payload(7), with_payload(9))),
            nan | 7,
            "the first NaN"
        );
        assert_eq!(bits(add(dec("1"), with_payload(9))), nan | 9);
        assert_eq!(bits(add(with_payload(10_u128.pow(33)), dec("1"))), nan);
        check("Infinity", '+', "1E+6144", "Infinity");
        check("-Infinity", '+', "5", "-Infinity");
        check("5", '-', "Infinity", "-Infinity");
        check("Infinity", '+', "Infinity", "Infinity");
        check("Infinity", '-', "-Infinity", "Infinity");
        assert_eq!(bits(add(dec("Infinity"), dec("-Infinity"))), nan);
        assert_eq!(bits(subtract(dec("-Infinity"), dec("-Infinity"))), nan);
    }

    #[test]
    fn non_canonical_coefficients_read_as_zero() {
        // 10^34 in the first form, exponent 0: non-canonical.
        let big = Decimal128::from_bytes(encode(false, MAX_COEFFICIENT + 1, 0).to_le_bytes());
        assert_eq!(add(big, dec("1.5")).bytes(), dec("1.5").bytes());
        // The second form, exponent -2 (biased 6174): zero at that exponent.
        let second = (0b11 << 125) | (6174_u128 << 111) | 5;
        let second = Decimal128::from_bytes(second.to_le_bytes());
        assert_eq!(add(second, dec("1")).bytes(), dec("1.00").bytes());
    }

    #[test]
    fn integers_are_decimals_of_exponent_0() {
        let int = |v: Bson| operand(&v).expect("a number");
        assert_eq!(int(Bson::Int32(-7)).bytes(), dec("-7").bytes());
        assert_eq!(
            int(Bson::Int64(i64::MIN)).bytes(),
            dec("-9223372036854775808").bytes()
        );
        assert_eq!(int(Bson::Int64(0)).bytes(), dec("0").bytes());
        assert_eq!(
            add(int(Bson::Int32(1)), dec("1.50")).bytes(),
            dec("2.50").bytes()
        );
        assert!(operand(&Bson::Double(1.0)).is_none());
        assert_eq!(
            add_numbers(&Bson::Int64(2), &Bson::Decimal128(dec("0.5"))).map(|d| d.bytes()),
            Some(dec("2.5").bytes())
        );
        assert_eq!(
            subtract_numbers(&Bson::Decimal128(dec("0.5")), &Bson::Int32(2)).map(|d| d.bytes()),
            Some(dec("-1.5").bytes())
        );
        assert!(add_numbers(&Bson::Int64(2), &Bson::Int32(1)).is_none());
        assert!(add_numbers(&Bson::Double(2.0), &Bson::Decimal128(dec("1"))).is_none());
        assert!(subtract_numbers(&Bson::Decimal128(dec("1")), &Bson::Null).is_none());
        assert!(operand(&Bson::String("1".into())).is_none());
    }
}
