//! `skill broker prune --before DATE`: drops old rows, keeping what remains verifiable.

use crate::cli::PruneArgs;
use crate::exit;
use crate::journal::PruneError;
use crate::util;

pub fn run(args: &PruneArgs) -> anyhow::Result<u8> {
    let before_ms = parse_date(&args.before)
        .map_err(|e| exit::coded(exit::USAGE, format!("--before {:?}: {e}", args.before)))?;
    let home = super::home(args.home.as_deref())?;
    let path = home.join("journal.db");
    let Some(journal) = super::open(&home)? else {
        println!("no journal at {}: nothing to prune", path.display());
        return Ok(exit::SUCCESS);
    };
    let report = match journal.prune(before_ms) {
        Ok(report) => report,
        Err(err @ PruneError::Broken(_)) => {
            return Err(exit::coded(
                exit::CHAIN_BROKEN,
                format!("journal {}: {err}", path.display()),
            ));
        }
        Err(PruneError::Journal(err)) => return Err(err.into()),
    };
    if report.rows_removed == 0 {
        println!(
            "no rows before {}: nothing pruned",
            util::rfc3339_ms(before_ms)
        );
    } else {
        println!(
            "pruned {} rows (seq ..{}) written before {}; checkpoint recorded at seq {}; {} finished invocations forgotten",
            report.rows_removed,
            report.through_seq,
            util::rfc3339_ms(before_ms),
            report.through_seq,
            report.invocations_removed
        );
    }
    Ok(exit::SUCCESS)
}

/// `YYYY-MM-DD` (00:00 UTC that day) or an RFC 3339 time (`2026-11-29T08:00:00Z`,
/// `2026-11-29T08:00:00.5+01:00`), as milliseconds since the epoch.
pub fn parse_date(text: &str) -> Result<i64, String> {
    let b = text.trim().as_bytes();
    let num = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = b.get(range).ok_or("too short")?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(
                "expected YYYY-MM-DD or an RFC 3339 time such as 2026-11-29T08:00:00Z".into(),
            );
        }
        Ok(std::str::from_utf8(part)
            .map_err(|e| e.to_string())?
            .parse()
            .map_err(|_| "bad number")?)
    };
    let shape = "expected YYYY-MM-DD or an RFC 3339 time such as 2026-11-29T08:00:00Z";
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(shape.into());
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let days_in_month = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => return Err(format!("month {m} does not exist")),
    };
    if !(1..=days_in_month).contains(&d) {
        return Err(format!("day {d} does not exist in {y:04}-{m:02}"));
    }
    let day_ms = util::days_from_civil(y, m as u32, d as u32) * 86_400_000;
    if b.len() == 10 {
        return Ok(day_ms);
    }
    if b.len() < 20 || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' || b[16] != b':' {
        return Err(shape.into());
    }
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if hh > 23 || mm > 59 || ss > 60 {
        return Err("time of day out of range".into());
    }
    let mut i = 19;
    let mut millis = 0;
    if b[i] == b'.' {
        let start = i + 1;
        i = start;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(shape.into());
        }
        let frac = &text.trim()[start..i.min(start + 3)];
        millis = format!("{frac:0<3}")
            .parse::<i64>()
            .map_err(|_| shape.to_owned())?;
    }
    let offset_ms = match &b[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return Err("offset out of range".into());
            }
            let off = (oh * 60 + om) * 60_000;
            if *sign == b'+' { off } else { -off }
        }
        _ => return Err(format!("{shape} (the time needs a Z or ±HH:MM offset)")),
    };
    Ok(day_ms + ((hh * 60 + mm) * 60 + ss.min(59)) * 1000 + millis - offset_ms)
}

#[cfg(test)]
mod tests {
    use super::parse_date;

    #[test]
    fn dates_and_rfc3339_times() {
        assert_eq!(parse_date("1970-01-02"), Ok(86_400_000));
        assert_eq!(
            parse_date("2026-11-29T08:00:00.123Z"),
            Ok(1_795_939_200_123)
        );
        assert_eq!(
            parse_date("2026-11-29T09:00:00.1234+01:00"),
            Ok(1_795_939_200_123)
        );
        assert_eq!(
            parse_date("2026-11-29 07:30:00-00:30"),
            Ok(1_795_939_200_000)
        );
        assert_eq!(parse_date("2024-02-29"), Ok(19_782 * 86_400_000));
        for bad in [
            "2026-02-30",
            "2026-13-01",
            "29-11-2026",
            "2026-11-29T08:00:00",
            "yesterday",
            "",
            "2026-11-29T25:00:00Z",
        ] {
            assert!(parse_date(bad).is_err(), "{bad}");
        }
    }
}
