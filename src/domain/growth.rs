//! Platform metrics with growth: the periods, the growth rule and the months of the revenue
//! chart. No I/O.

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};

/// The growth periods (`7d`, `30d`, `90d`, `1y`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Week,
    Month,
    Quarter,
    Year,
}

impl Period {
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "7d" => Self::Week,
            "30d" => Self::Month,
            "90d" => Self::Quarter,
            "1y" => Self::Year,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Week => "7d",
            Self::Month => "30d",
            Self::Quarter => "90d",
            Self::Year => "1y",
        }
    }

    pub fn length(self) -> Duration {
        Duration::days(match self {
            Self::Week => 7,
            Self::Month => 30,
            Self::Quarter => 90,
            Self::Year => 365,
        })
    }

    /// The current window `[now - length, now)` and the one of equal length before it.
    pub fn windows(self, now: DateTime<Utc>) -> (Window, Window) {
        let start = now - self.length();
        (
            Window { start, end: now },
            Window {
                start: start - self.length(),
                end: start,
            },
        )
    }
}

/// A half-open interval of time, `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// Growth of `current` over `previous`, in percent with two decimals. When the earlier
/// period has no data the growth is 100 if the current has data, else 0.
pub fn growth(current: f64, previous: f64) -> f64 {
    if previous == 0.0 {
        return if current != 0.0 { 100.0 } else { 0.0 };
    }
    round2((current - previous) / previous.abs() * 100.0)
}

/// `part ÷ whole` in percent with two decimals; 0 when `whole` is 0.
pub fn percent(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        round2(part as f64 * 100.0 / whole as f64)
    }
}

pub fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// The last twelve calendar months up to and including `now`'s, oldest first: each as its
/// `YYYY-MM` label and its window.
pub fn last_twelve_months(now: DateTime<Utc>) -> Vec<(String, Window)> {
    let first_of = |y: i32, m: u32| {
        Utc.from_utc_datetime(
            &NaiveDate::from_ymd_opt(y, m, 1)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .unwrap_or_default(),
        )
    };
    let months_since_epoch = now.year() * 12 + now.month0() as i32;
    (0..12)
        .rev()
        .map(|back| {
            let n = months_since_epoch - back;
            let (y, m) = (n.div_euclid(12), n.rem_euclid(12) as u32 + 1);
            let (ny, nm) = ((n + 1).div_euclid(12), (n + 1).rem_euclid(12) as u32 + 1);
            (
                format!("{y:04}-{m:02}"),
                Window {
                    start: first_of(y, m),
                    end: first_of(ny, nm),
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_parse_and_reject() {
        for p in ["7d", "30d", "90d", "1y"] {
            assert_eq!(Period::parse(p).unwrap().as_str(), p);
        }
        assert!(Period::parse("2w").is_none());
        let now = Utc.with_ymd_and_hms(2026, 11, 25, 12, 0, 0).unwrap();
        let (cur, prev) = Period::Week.windows(now);
        assert_eq!(cur.end, now);
        assert_eq!(prev.end, cur.start);
        assert_eq!(cur.end - cur.start, prev.end - prev.start);
    }

    #[test]
    fn growth_follows_the_empty_previous_period_rule() {
        assert_eq!(growth(5.0, 0.0), 100.0);
        assert_eq!(growth(0.0, 0.0), 0.0);
        assert_eq!(growth(150.0, 100.0), 50.0);
        assert_eq!(growth(50.0, 100.0), -50.0);
        assert_eq!(percent(1, 3), 33.33);
        assert_eq!(percent(1, 0), 0.0);
    }

    #[test]
    fn twelve_months_end_with_the_current_one_across_a_new_year() {
        let now = Utc.with_ymd_and_hms(2026, 2, 10, 0, 0, 0).unwrap();
        let months = last_twelve_months(now);
        assert_eq!(months.len(), 12);
        assert_eq!(months[0].0, "2025-03");
        assert_eq!(months[10].0, "2026-01");
        assert_eq!(months[11].0, "2026-02");
        assert_eq!(months[11].1.end.to_rfc3339(), "2026-03-01T00:00:00+00:00");
        assert!(months.windows(2).all(|w| w[0].1.end == w[1].1.start));
    }
}
