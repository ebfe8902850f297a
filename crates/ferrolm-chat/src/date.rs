//! Calendar dates for `strftime_now`: a proleptic Gregorian date, the current UTC time, and a
//! `strftime` that formats like glibc's (which Python's `datetime.strftime` calls on Linux).

use std::time::{SystemTime, UNIX_EPOCH};

/// A calendar date (proleptic Gregorian), used as "today" by the templates' `strftime_now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CalendarDate {
    year: i32,
    month: u8,
    day: u8,
}

impl CalendarDate {
    /// The date `year-month-day`, or `None` if there is no such day (`month` is 1–12, `day`
    /// 1–28/29/30/31, `year` 1–9999 as in Python's `datetime`).
    pub fn new(year: i32, month: u32, day: u32) -> Option<CalendarDate> {
        if !(1..=9999).contains(&year) || !(1..=12).contains(&month) {
            return None;
        }
        let month = month as u8;
        if day == 0 || day > u32::from(days_in_month(year, month)) {
            return None;
        }
        Some(CalendarDate { year, month, day: day as u8 })
    }

    /// Parses `YYYY-MM-DD`.
    pub fn parse(text: &str) -> Option<CalendarDate> {
        let mut parts = text.trim().splitn(3, '-');
        let year = parts.next()?.parse().ok()?;
        let month = parts.next()?.parse().ok()?;
        let day = parts.next()?.parse().ok()?;
        CalendarDate::new(year, month, day)
    }

    /// Today's date in UTC, from the system clock.
    pub fn today_utc() -> CalendarDate {
        DateTime::now_utc().date
    }

    /// The date formatted like C's `strftime` (C locale, at midnight), e.g. `"%d %b %Y"`.
    pub fn format(&self, format: &str) -> String {
        strftime(&DateTime::midnight(*self), format)
    }

    /// The year.
    pub fn year(&self) -> i32 {
        self.year
    }

    /// The month, 1–12.
    pub fn month(&self) -> u32 {
        u32::from(self.month)
    }

    /// The day of the month, 1–31.
    pub fn day(&self) -> u32 {
        u32::from(self.day)
    }

    /// Days since 1970-01-01 (negative before).
    fn days_since_epoch(&self) -> i64 {
        // Howard Hinnant's days_from_civil.
        let y = i64::from(self.year) - i64::from(self.month <= 2);
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let m = i64::from(self.month);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    /// The date `days` after 1970-01-01.
    fn from_days_since_epoch(days: i64) -> CalendarDate {
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
        let year = (yoe + era * 400 + i64::from(month <= 2)) as i32;
        CalendarDate { year, month, day }
    }

    /// Day of the week, 0 = Sunday … 6 = Saturday.
    fn weekday_from_sunday(&self) -> u32 {
        // 1970-01-01 was a Thursday.
        (self.days_since_epoch() + 4).rem_euclid(7) as u32
    }

    /// Day of the year, 1–366.
    fn day_of_year(&self) -> u32 {
        let jan1 = CalendarDate { year: self.year, month: 1, day: 1 };
        (self.days_since_epoch() - jan1.days_since_epoch()) as u32 + 1
    }
}

impl std::fmt::Display for CalendarDate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

fn is_leap(year: i32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i32, month: u8) -> u8 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A date with a time of day (no time zone), what `strftime` formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DateTime {
    pub date: CalendarDate,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub microsecond: u32,
}

impl DateTime {
    /// Midnight at the start of `date`.
    pub fn midnight(date: CalendarDate) -> DateTime {
        DateTime { date, hour: 0, minute: 0, second: 0, microsecond: 0 }
    }

    /// The current UTC time from the system clock (the epoch if the clock is before it).
    pub fn now_utc() -> DateTime {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs() as i64;
        let date = CalendarDate::from_days_since_epoch(secs.div_euclid(86_400));
        let rem = secs.rem_euclid(86_400) as u32;
        DateTime {
            date,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
            microsecond: since.subsec_micros(),
        }
    }
}

const DAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Formats `t` like C's `strftime` in the C locale with glibc's extensions: the flags `-` (no
/// padding), `_` (pad with spaces) and `0` (pad with zeros) after `%`; `%f` is Python's
/// microseconds; `%z` and `%Z` are empty (the time is naive, as in Python's `datetime.now()`).
/// An unknown directive is copied through unchanged.
pub(crate) fn strftime(t: &DateTime, format: &str) -> String {
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let flag = match chars.peek() {
            Some(&f @ ('-' | '_' | '0')) => {
                chars.next();
                Some(f)
            }
            _ => None,
        };
        let Some(d) = chars.next() else {
            out.push('%');
            if let Some(f) = flag {
                out.push(f);
            }
            break;
        };
        let num = |out: &mut String, v: i64, width: usize, default_pad: char| {
            let pad = match flag {
                Some('-') => None,
                Some('_') => Some(' '),
                Some('0') => Some('0'),
                _ => Some(default_pad),
            };
            let digits = v.to_string();
            if let Some(p) = pad {
                for _ in digits.len()..width {
                    out.push(p);
                }
            }
            out.push_str(&digits);
        };
        let date = &t.date;
        let wday = date.weekday_from_sunday();
        let month_name = MONTHS[usize::from(date.month) - 1];
        let day_name = DAYS[wday as usize];
        let hour12 = if t.hour.is_multiple_of(12) { 12 } else { t.hour % 12 };
        match d {
            'a' => out.push_str(&day_name[..3]),
            'A' => out.push_str(day_name),
            'b' | 'h' => out.push_str(&month_name[..3]),
            'B' => out.push_str(month_name),
            'd' => num(&mut out, i64::from(date.day), 2, '0'),
            'e' => num(&mut out, i64::from(date.day), 2, ' '),
            'm' => num(&mut out, i64::from(date.month), 2, '0'),
            'y' => num(&mut out, i64::from(date.year % 100), 2, '0'),
            'Y' => num(&mut out, i64::from(date.year), 1, '0'),
            'C' => num(&mut out, i64::from(date.year / 100), 2, '0'),
            'j' => num(&mut out, i64::from(date.day_of_year()), 3, '0'),
            'w' => num(&mut out, i64::from(wday), 1, '0'),
            'u' => num(&mut out, i64::from(if wday == 0 { 7 } else { wday }), 1, '0'),
            'U' => num(&mut out, i64::from((date.day_of_year() + 6 - wday) / 7), 2, '0'),
            'W' => num(&mut out, i64::from((date.day_of_year() + 6 - (wday + 6) % 7) / 7), 2, '0'),
            'H' => num(&mut out, i64::from(t.hour), 2, '0'),
            'k' => num(&mut out, i64::from(t.hour), 2, ' '),
            'I' => num(&mut out, i64::from(hour12), 2, '0'),
            'l' => num(&mut out, i64::from(hour12), 2, ' '),
            'M' => num(&mut out, i64::from(t.minute), 2, '0'),
            'S' => num(&mut out, i64::from(t.second), 2, '0'),
            'f' => num(&mut out, i64::from(t.microsecond), 6, '0'),
            'p' => out.push_str(if t.hour < 12 { "AM" } else { "PM" }),
            'P' => out.push_str(if t.hour < 12 { "am" } else { "pm" }),
            'z' | 'Z' => {}
            'n' => out.push('\n'),
            't' => out.push('\t'),
            '%' => out.push('%'),
            'D' | 'x' => out.push_str(&strftime(t, "%m/%d/%y")),
            'F' => out.push_str(&strftime(t, "%Y-%m-%d")),
            'T' | 'X' => out.push_str(&strftime(t, "%H:%M:%S")),
            'R' => out.push_str(&strftime(t, "%H:%M")),
            'r' => out.push_str(&strftime(t, "%I:%M:%S %p")),
            'c' => out.push_str(&strftime(t, "%a %b %e %H:%M:%S %Y")),
            other => {
                out.push('%');
                if let Some(f) = flag {
                    out.push(f);
                }
                out.push(other);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i32, m: u32, d: u32) -> DateTime {
        DateTime::midnight(CalendarDate::new(y, m, d).expect("valid date"))
    }

    #[test]
    fn validates_dates() {
        assert!(CalendarDate::new(2024, 2, 29).is_some());
        assert!(CalendarDate::new(2023, 2, 29).is_none());
        assert!(CalendarDate::new(2100, 2, 29).is_none());
        assert!(CalendarDate::new(2000, 2, 29).is_some());
        assert!(CalendarDate::new(2024, 13, 1).is_none());
        assert!(CalendarDate::new(2024, 4, 31).is_none());
        assert_eq!(CalendarDate::parse("2026-11-21"), CalendarDate::new(2026, 11, 21));
        assert_eq!(CalendarDate::parse("2026-11"), None);
        assert_eq!(CalendarDate::new(2026, 1, 5).map(|d| d.to_string()).as_deref(), Some("2026-01-05"));
    }

    #[test]
    fn epoch_days_round_trip() {
        for days in [-800_000i64, -1, 0, 1, 59, 365, 10_957, 20_000, 2_000_000] {
            let d = CalendarDate::from_days_since_epoch(days);
            assert_eq!(d.days_since_epoch(), days, "{d}");
        }
        assert_eq!(CalendarDate::from_days_since_epoch(0).to_string(), "1970-01-01");
        assert_eq!(CalendarDate::from_days_since_epoch(19_723).to_string(), "2024-01-01");
    }

    #[test]
    fn formats_like_python() {
        // Values from Python: datetime(2026, 11, 21).strftime(...).
        let t = at(2026, 11, 21);
        assert_eq!(strftime(&t, "%d %b %Y"), "21 Nov 2026");
        assert_eq!(strftime(&t, "%Y-%m-%d"), "2026-11-21");
        assert_eq!(strftime(&t, "%A, %B %-d, %Y"), "Saturday, November 21, 2026");
        assert_eq!(strftime(&t, "%a %j %U %W %w %u %y"), "Sat 325 46 46 6 6 26");
        assert_eq!(strftime(&t, "%H:%M:%S %I %p %f"), "00:00:00 12 AM 000000");
        assert_eq!(strftime(&t, "%c"), "Sat Nov 21 00:00:00 2026");
        assert_eq!(strftime(&t, "100%% %q %"), "100% %q %");
        let t = at(2025, 1, 5);
        assert_eq!(strftime(&t, "%e|%-m|%_d|%j|%U|%W"), " 5|1| 5|005|01|00");
    }
}
