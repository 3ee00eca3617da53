//! Reputation: the rules of a review's words and rating, the internal rating administrators
//! keep, the lead score (0–100) and the expert level it suggests.

use chrono::{DateTime, Duration, Utc};
use rust_decimal::prelude::ToPrimitive as _;
use rust_decimal::{Decimal, RoundingStrategy};

use super::state::state_enum;

state_enum! {
    /// Whether a review is shown (`reviews.visibility`): administrators hide and publish.
    pub enum ReviewVisibility {
        Published = "published",
        Hidden = "hidden",
    }
}

/// A review's rating: a whole number of stars.
pub const RATINGS: std::ops::RangeInclusive<i64> = 1..=5;
pub fn check_rating(rating: i64) -> Result<(), String> {
    if RATINGS.contains(&rating) {
        Ok(())
    } else {
        Err("must be a whole number from 1 to 5".into())
    }
}

/// An internal rating: 1.0 to 5.0 with at most one decimal.
pub fn check_internal_rating(rating: Decimal) -> Result<Decimal, String> {
    let rating = rating.normalize();
    if rating < Decimal::ONE || rating > Decimal::from(5) || rating.scale() > 1 {
        return Err("must be from 1.0 to 5.0 with at most one decimal".into());
    }
    Ok(rating)
}

/// Ratings received, summed up from `(rating, count)` pairs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatingSummary {
    /// Count per rating 1..=5.
    pub distribution: [i64; 5],
    pub total: i64,
    /// Mean rating to two decimals (half up), `None` without ratings.
    pub average: Option<Decimal>,
}

pub fn summarise(counts: &[(i64, i64)]) -> RatingSummary {
    let mut distribution = [0i64; 5];
    for &(rating, count) in counts {
        if RATINGS.contains(&rating) {
            distribution[(rating - 1) as usize] += count;
        }
    }
    let total: i64 = distribution.iter().sum();
    let sum: i64 = distribution.iter().zip(1i64..).map(|(n, r)| n * r).sum();
    let average = (total > 0).then(|| {
        (Decimal::from(sum) / Decimal::from(total))
            .round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero)
    });
    RatingSummary {
        distribution,
        total,
        average,
    }
}

/// What the lead score is computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct LeadInputs {
    /// Projects completed as company or expert.
    pub completed_projects: i64,
    /// Mean rating (1–5) of the revealed, published reviews received, and how many.
    pub review_average: Option<Decimal>,
    pub review_count: i64,
    pub email_verified: bool,
    pub profile_verified: bool,
    /// The last sign of activity (last login), if any.
    pub last_active_at: Option<DateTime<Utc>>,
    pub registered_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// The score's five components (each out of its weight) and their rounded sum.
#[derive(Debug, Clone, PartialEq)]
pub struct LeadScore {
    /// Out of 30: `min(completed, 10) / 10`.
    pub completed_projects: Decimal,
    /// Out of 25: `average / 5`, scaled by confidence `min(count, 5) / 5`.
    pub reviews: Decimal,
    /// Out of 20: e-mail verified 5, profile verified 15.
    pub verification: Decimal,
    /// Out of 15: last active within 7 days 15, 30 days 10, 90 days 5.
    pub recent_activity: Decimal,
    /// Out of 10: `min(days on the platform, 365) / 365`.
    pub time_on_platform: Decimal,
    /// 0–100, the components' sum rounded half up.
    pub total: i64,
}

/// Computes the lead score. Monotone in every input (more is never less) and bounded 0–100.
pub fn lead_score(i: &LeadInputs) -> LeadScore {
    let d = Decimal::from;
    let completed_projects = d(30) * d(i.completed_projects.clamp(0, 10)) / d(10);
    let reviews = match i.review_average {
        Some(avg) if i.review_count > 0 => {
            let avg = avg.clamp(Decimal::ZERO, d(5));
            d(25) * avg / d(5) * d(i.review_count.clamp(0, 5)) / d(5)
        }
        _ => Decimal::ZERO,
    };
    let verification =
        d(if i.email_verified { 5 } else { 0 }) + d(if i.profile_verified { 15 } else { 0 });
    let recent_activity = d(match i.last_active_at.map(|t| i.now - t) {
        Some(ago) if ago <= Duration::days(7) => 15,
        Some(ago) if ago <= Duration::days(30) => 10,
        Some(ago) if ago <= Duration::days(90) => 5,
        _ => 0,
    });
    let days = (i.now - i.registered_at).num_days().clamp(0, 365);
    let time_on_platform = d(10) * d(days) / d(365);
    let sum = completed_projects + reviews + verification + recent_activity + time_on_platform;
    let total = sum
        .round_dp_with_strategy(0, RoundingStrategy::MidpointAwayFromZero)
        .to_i64()
        .unwrap_or_default()
        .clamp(0, 100);
    let two = |v: Decimal| v.round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero);
    LeadScore {
        completed_projects: two(completed_projects),
        reviews: two(reviews),
        verification,
        recent_activity,
        time_on_platform: two(time_on_platform),
        total,
    }
}

/// The expert level a lead score suggests: `Global` 0–50, `Pro` 51–75, `Enterprise` 76–100.
pub fn suggested_level(score: i64) -> &'static str {
    match score {
        ..=50 => "Global",
        51..=75 => "Pro",
        _ => "Enterprise",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn base(now: DateTime<Utc>) -> LeadInputs {
        LeadInputs {
            completed_projects: 0,
            review_average: None,
            review_count: 0,
            email_verified: false,
            profile_verified: false,
            last_active_at: None,
            registered_at: now,
            now,
        }
    }

    #[test]
    fn each_component_has_its_weight() {
        let now = Utc::now();
        assert_eq!(lead_score(&base(now)).total, 0);
        let full = LeadInputs {
            completed_projects: 12,
            review_average: Some(Decimal::from(5)),
            review_count: 9,
            email_verified: true,
            profile_verified: true,
            last_active_at: Some(now),
            registered_at: now - Duration::days(400),
            now,
        };
        let s = lead_score(&full);
        assert_eq!(
            (
                s.completed_projects,
                s.reviews,
                s.verification,
                s.recent_activity,
                s.time_on_platform,
                s.total
            ),
            (d(30), d(25), d(20), d(15), d(10), 100)
        );
    }

    fn d(v: i64) -> Decimal {
        Decimal::from(v)
    }

    #[test]
    fn a_prepared_expert_scores_as_computed_by_hand() {
        let now = Utc::now();
        // 3 projects: 9; average 4.5 over 2 reviews: 25 × 0.9 × 0.4 = 9; e-mail only: 5;
        // active 20 days ago: 10; 73 days: 2. Sum 35.
        let s = lead_score(&LeadInputs {
            completed_projects: 3,
            review_average: Some(Decimal::new(45, 1)),
            review_count: 2,
            email_verified: true,
            profile_verified: false,
            last_active_at: Some(now - Duration::days(20)),
            registered_at: now - Duration::days(73),
            now,
        });
        assert_eq!(s.completed_projects, d(9));
        assert_eq!(s.reviews, d(9));
        assert_eq!(s.time_on_platform, d(2));
        assert_eq!(s.total, 35);
    }

    #[test]
    fn the_sum_rounds_half_up() {
        let now = Utc::now();
        // One review averaging 2.5: 25 × 0.5 × 0.2 = 2.5, which rounds up to 3.
        let s = lead_score(&LeadInputs {
            review_average: Some(Decimal::new(25, 1)),
            review_count: 1,
            ..base(now)
        });
        assert_eq!(s.reviews, Decimal::new(25, 1));
        assert_eq!(s.total, 3);
    }

    #[test]
    fn activity_steps_and_levels() {
        let now = Utc::now();
        let at = |days| {
            lead_score(&LeadInputs {
                last_active_at: Some(now - Duration::days(days)),
                ..base(now)
            })
            .recent_activity
        };
        assert_eq!(
            (at(7), at(8), at(30), at(31), at(90), at(91)),
            (d(15), d(10), d(10), d(5), d(5), d(0))
        );
        assert_eq!(
            [0, 50, 51, 75, 76, 100].map(suggested_level),
            ["Global", "Global", "Pro", "Pro", "Enterprise", "Enterprise"]
        );
    }

    #[test]
    fn ratings_sum_up_to_a_two_decimal_average() {
        let s = summarise(&[(5, 2), (4, 1), (9, 3)]);
        assert_eq!(s.distribution, [0, 0, 0, 1, 2]);
        assert_eq!((s.total, s.average), (3, Some(Decimal::new(467, 2))));
        assert_eq!(summarise(&[]).average, None);
    }

    #[test]
    fn internal_ratings_have_one_decimal_within_bounds() {
        let ok = |s: &str| check_internal_rating(s.parse().unwrap()).is_ok();
        assert!(ok("1.0") && ok("4.5") && ok("5") && ok("3.50"));
        assert!(!ok("0.9") && !ok("5.1") && !ok("4.25"));
    }

    fn inputs() -> impl Strategy<Value = LeadInputs> {
        (
            -5i64..40,
            proptest::option::of(0i64..=50),
            0i64..20,
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(0i64..400),
            0i64..1000,
        )
            .prop_map(|(completed, avg, count, email, profile, active, age)| {
                let now = DateTime::<Utc>::from_timestamp(1_800_000_000, 0).unwrap();
                LeadInputs {
                    completed_projects: completed,
                    review_average: avg.map(|a| Decimal::new(a, 1)),
                    review_count: count,
                    email_verified: email,
                    profile_verified: profile,
                    last_active_at: active.map(|a| now - Duration::days(a)),
                    registered_at: now - Duration::days(age),
                    now,
                }
            })
    }

    proptest! {
        #[test]
        fn the_score_is_bounded(i in inputs()) {
            let s = lead_score(&i);
            prop_assert!((0..=100).contains(&s.total));
        }

        #[test]
        fn the_score_is_monotone_in_each_input(i in inputs()) {
            let s = lead_score(&i).total;
            let better = [
                LeadInputs { completed_projects: i.completed_projects + 1, ..i.clone() },
                LeadInputs {
                    review_average: Some(i.review_average.unwrap_or_default() + Decimal::new(1, 1)),
                    ..i.clone()
                },
                LeadInputs { review_count: i.review_count + 1, ..i.clone() },
                LeadInputs { email_verified: true, ..i.clone() },
                LeadInputs { profile_verified: true, ..i.clone() },
                LeadInputs {
                    last_active_at: Some(i.last_active_at.map_or(i.now - Duration::days(365), |t| t + Duration::days(1))),
                    ..i.clone()
                },
                LeadInputs { registered_at: i.registered_at - Duration::days(1), ..i.clone() },
            ];
            for b in better {
                prop_assert!(lead_score(&b).total >= s, "{b:?} scored less than {i:?}");
            }
        }
    }
}
