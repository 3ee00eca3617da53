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

/// A window cut at UTC midnights: the whole days inside it, which the day tallies count, and
/// the parts of a day before and after them, which are counted from the rows. The three parts
/// are disjoint and together are the window; a window within one day is all `head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DayCut {
    pub head: Window,
    /// `[first, until)`, as the tallies key them (`YYYY-MM-DD`); empty when `first == until`.
    pub days: (NaiveDate, NaiveDate),
    pub tail: Window,
}

impl Window {
    pub fn cut_at_days(self) -> DayCut {
        let first = day_after_or_at(self.start);
        let until = self.end.date_naive();
        if first >= until {
            return DayCut {
                head: self,
                days: (first, first),
                tail: Window {
                    start: self.end,
                    end: self.end,
                },
            };
        }
        DayCut {
            head: Window {
                start: self.start,
                end: midnight(first),
            },
            days: (first, until),
            tail: Window {
                start: midnight(until),
                end: self.end,
            },
        }
    }

    /// From `start` on, without end: the part of its day left, and every day after it.
    pub fn cut_from(start: DateTime<Utc>) -> DayCut {
        let first = day_after_or_at(start);
        let head = Window {
            start,
            end: midnight(first),
        };
        DayCut {
            head,
            days: (first, last_day()),
            tail: Window {
                start: head.end,
                end: head.end,
            },
        }
    }
}

/// The end of days a tally key can name (`9999-12-31`).
fn last_day() -> NaiveDate {
    NaiveDate::from_ymd_opt(9999, 12, 31).unwrap_or(NaiveDate::MAX)
}

/// A day as the tallies key it.
pub fn day_key(day: NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

/// The first midnight at or after `t`.
fn day_after_or_at(t: DateTime<Utc>) -> NaiveDate {
    let day = t.date_naive();
    if midnight(day) == t {
        day
    } else {
        day.succ_opt().unwrap_or(day)
    }
}

/// The start of `day` (UTC).
pub fn midnight(day: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).unwrap_or_default())
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
    let first_of =
        |y: i32, m: u32| NaiveDate::from_ymd_opt(y, m, 1).map_or_else(Default::default, midnight);
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
    fn a_window_cut_at_days_is_its_parts_in_order() {
        let at = |d: u32, h: u32| Utc.with_ymd_and_hms(2026, 11, d, h, 0, 0).unwrap();
        let day = |d: u32| NaiveDate::from_ymd_opt(2026, 11, d).unwrap();
        let cut = Window {
            start: at(3, 10),
            end: at(7, 9),
        }
        .cut_at_days();
        assert_eq!(
            cut.head,
            Window {
                start: at(3, 10),
                end: at(4, 0)
            }
        );
        assert_eq!(cut.days, (day(4), day(7)));
        assert_eq!(
            cut.tail,
            Window {
                start: at(7, 0),
                end: at(7, 9)
            }
        );
        // Bounds at midnight leave no part of a day.
        let cut = Window {
            start: at(3, 0),
            end: at(7, 0),
        }
        .cut_at_days();
        assert_eq!((cut.head.start, cut.head.end), (at(3, 0), at(3, 0)));
        assert_eq!(cut.days, (day(3), day(7)));
        assert_eq!((cut.tail.start, cut.tail.end), (at(7, 0), at(7, 0)));
        // Within a day, and across one midnight only: no whole day.
        for (start, end) in [(at(3, 1), at(3, 20)), (at(3, 20), at(4, 5))] {
            let cut = Window { start, end }.cut_at_days();
            assert_eq!(cut.head, Window { start, end });
            assert_eq!(cut.days.0, cut.days.1);
            assert_eq!(cut.tail.start, cut.tail.end);
        }
        assert_eq!(day_key(day(4)), "2026-11-04");
        let open = Window::cut_from(at(3, 10));
        assert_eq!(
            open.head,
            Window {
                start: at(3, 10),
                end: at(4, 0)
            }
        );
        assert_eq!(
            (day_key(open.days.0), day_key(open.days.1)),
            ("2026-11-04".into(), "9999-12-31".into())
        );
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
