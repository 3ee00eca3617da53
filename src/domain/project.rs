//! Project and proposal rules with no I/O: states and their moves, who may apply, the
//! milestone plan of a proposal, deadlines and the curation score.

use chrono::{DateTime, NaiveDateTime, Utc};

use super::state::{Lifecycle, state_enum};

state_enum! {
    /// The states of a project. `published` and `open` are legacy states still accepted for
    /// selection; `cancelled` is added by this service (DESIGN §6).
    pub enum ProjectStatus {
        Draft = "draft",
        PendingPublication = "pending_publication",
        PublishedPrivate = "published_private",
        PublishedCurated = "published_curated",
        Bidding = "bidding",
        Assigned = "assigned",
        InProgress = "in_progress",
        InReview = "in_review",
        Completed = "completed",
        Disputed = "disputed",
        Published = "published",
        Open = "open",
        Cancelled = "cancelled",
    }
}

impl Lifecycle for ProjectStatus {
    /// The moves the workflows make. An administrator's forced move ([`admin_move`]) is
    /// the one way around them, with its own rules.
    fn can_move_to(self, next: Self) -> bool {
        use ProjectStatus::*;
        match (self, next) {
            (from, to) if manual_move_allowed(from, to, true) => true,
            // Validation publishes a project or sends it back.
            (PendingPublication, Draft | PublishedCurated | PublishedPrivate) => true,
            // A selection, and its undoing back to the state it was made from.
            (from, Assigned) => from.allows_selection(),
            (Assigned, to) if to.allows_selection() => true,
            // Work: funded, handed in, sent back, finished, disputed or cancelled.
            (Assigned, InProgress) | (InProgress, InReview) | (InReview, InProgress) => true,
            (Assigned | InProgress | InReview, Completed | Disputed | Cancelled) => true,
            // A dispute decided: work goes on, or the project ends.
            (Disputed, InProgress | Completed | Cancelled) => true,
            _ => false,
        }
    }
}

impl ProjectStatus {
    /// A company may select an expert from these states.
    pub fn allows_selection(self) -> bool {
        matches!(
            self,
            Self::PublishedCurated
                | Self::PublishedPrivate
                | Self::Bidding
                | Self::Published
                | Self::Open
        )
    }

    /// Not yet published: selecting here is a 400 with an explanation.
    pub fn is_unpublished(self) -> bool {
        matches!(self, Self::Draft | Self::PendingPublication)
    }

    /// No expert chosen yet: the project may still be edited or deleted.
    pub fn is_before_selection(self) -> bool {
        self.is_unpublished() || self.allows_selection()
    }
}

/// What a project's payments hold, for an administrator's forced move.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoneyOnProject {
    /// Payments `held` or `disputed`: money in escrow.
    pub in_escrow: usize,
    /// Payments `pending`: an authorisation may still arrive.
    pub pending: usize,
}

/// Why an administrator may not force a project from `from` to `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminMoveRefusal {
    /// Same state, or a work state for a project without an expert.
    InvalidTransition,
    /// The move would leave money in escrow with no way to release or refund it.
    MoneyStranded,
}

/// Administrators may move a project to any state, except where money would be stranded:
/// `completed` needs every payment settled (none pending, held or disputed); `cancelled`
/// and the states before selection need nothing in escrow (pending authorisations are
/// cancelled with the move); the work states need an expert.
pub fn admin_move(
    from: ProjectStatus,
    to: ProjectStatus,
    has_expert: bool,
    money: MoneyOnProject,
) -> Result<(), AdminMoveRefusal> {
    use ProjectStatus::*;
    if from == to {
        return Err(AdminMoveRefusal::InvalidTransition);
    }
    match to {
        Completed if money.in_escrow + money.pending > 0 => Err(AdminMoveRefusal::MoneyStranded),
        Cancelled if money.in_escrow > 0 => Err(AdminMoveRefusal::MoneyStranded),
        s if s.is_before_selection() && money.in_escrow > 0 => Err(AdminMoveRefusal::MoneyStranded),
        Assigned | InProgress | InReview | Disputed | Completed if !has_expert => {
            Err(AdminMoveRefusal::InvalidTransition)
        }
        _ => Ok(()),
    }
}

state_enum! {
    /// A proposal (`applications.status`): waiting for the company (`pending`), sent back
    /// for changes (`needs_revision`), chosen (`accepted`) or not (`rejected`).
    pub enum ApplicationStatus {
        Pending = "pending",
        NeedsRevision = "needs_revision",
        Accepted = "accepted",
        Rejected = "rejected",
    }
}

impl Lifecycle for ApplicationStatus {
    /// The company asks for changes, the expert revises, one proposal is chosen and the
    /// others declined; undoing a selection puts them all back to `pending`.
    fn can_move_to(self, next: Self) -> bool {
        use ApplicationStatus::*;
        matches!(
            (self, next),
            (Pending, NeedsRevision | Accepted | Rejected)
                | (NeedsRevision, Pending | Rejected)
                | (Accepted | Rejected, Pending)
        )
    }
}

state_enum! {
    /// An administrator's decision on publishing a project (`projects.validation_status`).
    pub enum ValidationStatus {
        Pending = "pending",
        Approved = "approved",
        Rejected = "rejected",
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProjectType {
    Private,
    Curated,
}

impl ProjectType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Private => "private",
            Self::Curated => "curated",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "private" => Some(Self::Private),
            "curated" => Some(Self::Curated),
            _ => None,
        }
    }

    /// Where an approved project is published.
    pub fn published_status(self) -> ProjectStatus {
        match self {
            Self::Private => ProjectStatus::PublishedPrivate,
            Self::Curated => ProjectStatus::PublishedCurated,
        }
    }
}

/// Moves `PATCH /api/projects/{id}/status` allows. Everything that involves an expert or
/// money (selection, work, review, completion, disputes) has its own workflow and is never
/// set by hand; publication goes through validation.
pub fn manual_move_allowed(from: ProjectStatus, to: ProjectStatus, by_admin: bool) -> bool {
    use ProjectStatus::*;
    match (from, to) {
        (Draft, PendingPublication) => true,
        // A published curated project opens for bidding.
        (PublishedCurated | Published | Open, Bidding) => true,
        // A rejected or withdrawn publication goes back to the drawing board.
        (PendingPublication, Draft) => true,
        (from, Cancelled) => from.is_before_selection(),
        // Administrators may publish directly (the validation endpoint is the usual way).
        (PendingPublication, PublishedCurated | PublishedPrivate) => by_admin,
        _ => false,
    }
}

/// Why an expert may not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyRefusal {
    /// The project does not take proposals in its state.
    NotOpen,
    /// The project takes proposals, but only from experts it invited (or its target).
    NotInvited,
}

/// The specification's applying rules: invited experts on `published_curated`, `bidding`,
/// `published`; on `pending_publication` only with an invitation (formal or legacy); on
/// `published_private` only the project's target expert.
pub fn may_apply(
    status: ProjectStatus,
    invited: bool,
    is_target: bool,
) -> Result<(), ApplyRefusal> {
    use ProjectStatus::*;
    let allowed = match status {
        PublishedCurated | Bidding | Published | PendingPublication => invited,
        PublishedPrivate => is_target,
        _ => return Err(ApplyRefusal::NotOpen),
    };
    if allowed {
        Ok(())
    } else {
        Err(ApplyRefusal::NotInvited)
    }
}

/// The least number of milestones a proposal has.
pub const MIN_MILESTONES: usize = 3;
/// A generous upper bound, so a proposal stays a plan and not a spreadsheet.
pub const MAX_MILESTONES: usize = 50;

/// Checks a proposal's milestone amounts (minor units) against its budget: at least
/// [`MIN_MILESTONES`], each above zero, adding up exactly to the budget.
pub fn check_milestone_plan(budget_minor: i64, amounts: &[i64]) -> Result<(), String> {
    if amounts.len() < MIN_MILESTONES {
        return Err(format!("needs at least {MIN_MILESTONES} milestones"));
    }
    if amounts.len() > MAX_MILESTONES {
        return Err(format!("may have at most {MAX_MILESTONES} milestones"));
    }
    if amounts.iter().any(|a| *a <= 0) {
        return Err("every milestone amount must be above 0".to_owned());
    }
    let sum = amounts
        .iter()
        .try_fold(0i64, |acc, a| acc.checked_add(*a))
        .ok_or_else(|| "the milestone amounts are too large".to_owned())?;
    if sum != budget_minor {
        return Err(format!(
            "the milestone amounts add up to {} but proposed_budget is {}",
            format_minor(sum),
            format_minor(budget_minor)
        ));
    }
    Ok(())
}

/// `1234` → `"12.34"`, for messages.
pub fn format_minor(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// An amount as people read it: `125000, "eur"` → `1250.00 EUR`.
pub fn money_text(minor: i64, currency: &str) -> String {
    format!("{} {}", format_minor(minor), currency.to_uppercase())
}

/// Reads a deadline: RFC 3339, or `YYYY-MM-DDTHH:MM:SS` (with optional fraction) read as UTC.
pub fn parse_deadline(text: &str) -> Option<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .ok()
        .map(|t| t.and_utc())
}

/// What curation knows about an expert.
#[derive(Debug, Clone, Default)]
pub struct CurationCandidate {
    /// Skill names, any case.
    pub skills: Vec<String>,
    /// `Global`, `Pro` or `Enterprise`.
    pub level: String,
    /// 1.0 to 5.0, set by administrators.
    pub internal_rating: Option<f64>,
    /// Average published review rating (1 to 5) and how many there are.
    pub review_average: Option<f64>,
    pub review_count: i64,
}

/// A candidate's score, out of 100, and its parts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurationScore {
    pub total: f64,
    /// Required skills the expert has.
    pub matched_skills: usize,
    pub skills: f64,
    pub level: f64,
    pub internal_rating: f64,
    pub reviews: f64,
}

/// Scores an expert for a project, out of 100:
/// - skills, 50: the share of the project's required skills the expert has (case-insensitive);
///   a project with no required skills gives every expert 25;
/// - level, 20: Global 0, Pro 10, Enterprise 20;
/// - internal rating, 15: linear from 1.0 (0) to 5.0 (15); unrated experts get the middle, 7.5;
/// - reviews, 15: linear in the average from 1 (0) to 5 (15), scaled by confidence
///   `min(count, 5) / 5`, so one glowing review does not beat a long good record.
///
/// Suggestions leave out experts with no required skill when the project names any.
pub fn curation_score(required: &[String], c: &CurationCandidate) -> CurationScore {
    scored(
        required,
        c,
        c.review_average.map(|avg| (avg, c.review_count)),
    )
}

/// [`curation_score`] with `reviews` (average, count) in place of the candidate's own. A
/// suggestion scores hundreds of candidates several times, so nothing here allocates.
fn scored(
    required: &[String],
    c: &CurationCandidate,
    reviews: Option<(f64, i64)>,
) -> CurationScore {
    let matched_skills = required
        .iter()
        .filter(|r| c.skills.iter().any(|held| same_skill(held, r)))
        .count();
    let skills = if required.is_empty() {
        25.0
    } else {
        50.0 * matched_skills as f64 / required.len() as f64
    };
    let level = match c.level.as_str() {
        "Enterprise" => 20.0,
        "Pro" => 10.0,
        _ => 0.0,
    };
    let internal_rating = c
        .internal_rating
        .map_or(7.5, |r| 15.0 * (r.clamp(1.0, 5.0) - 1.0) / 4.0);
    let reviews = reviews.map_or(0.0, |(avg, count)| {
        let confidence = count.clamp(0, 5) as f64 / 5.0;
        15.0 * (avg.clamp(1.0, 5.0) - 1.0) / 4.0 * confidence
    });
    let total = ((skills + level + internal_rating + reviews) * 100.0).round() / 100.0;
    CurationScore {
        total,
        matched_skills,
        skills,
        level,
        internal_rating,
        reviews,
    }
}

/// The best score `c` could have whatever its reviews: the score with five reviews of five
/// stars (reviews weigh at most 15). A candidate whose ceiling is below the score of the last
/// expert a list keeps cannot enter it, so its reviews need not be read.
pub fn curation_ceiling(required: &[String], c: &CurationCandidate) -> f64 {
    scored(required, c, Some((5.0, 5))).total
}

/// Whether `held` and `required` name the same skill: equal once trimmed and lower-cased.
fn same_skill(held: &str, required: &str) -> bool {
    let (held, required) = (held.trim(), required.trim());
    if held.is_ascii() && required.is_ascii() {
        held.eq_ignore_ascii_case(required)
    } else {
        held.to_lowercase() == required.to_lowercase()
    }
}

/// The score at least `limit` of `candidates` reach whatever their reviews: the `limit`-th
/// best without any. A candidate whose ceiling is below it cannot enter a list of `limit`,
/// so only the others' reviews need reading. `None` when the candidates are no more than
/// `limit` (or `limit` is 0): then any of them may.
pub fn curation_bar<'a>(
    required: &[String],
    candidates: impl IntoIterator<Item = &'a CurationCandidate>,
    limit: usize,
) -> Option<f64> {
    let mut unreviewed: Vec<f64> = candidates
        .into_iter()
        .map(|c| scored(required, c, None).total)
        .collect();
    unreviewed.sort_by(|a, b| b.total_cmp(a));
    unreviewed.get(limit.checked_sub(1)?).copied()
}

/// Whether `c` could still enter the list whose bar is `bar` ([`curation_bar`]): its ceiling
/// reaches the bar, or there is none.
pub fn curation_contends(required: &[String], c: &CurationCandidate, bar: Option<f64>) -> bool {
    bar.is_none_or(|bar| curation_ceiling(required, c) >= bar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip() {
        for s in ProjectStatus::ALL {
            assert_eq!(ProjectStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(ProjectStatus::parse("nope"), None);
    }

    #[test]
    fn selection_states() {
        use ProjectStatus::*;
        let selectable: Vec<_> = ProjectStatus::ALL
            .into_iter()
            .filter(|s| s.allows_selection())
            .collect();
        assert_eq!(
            selectable,
            [PublishedPrivate, PublishedCurated, Bidding, Published, Open]
        );
        assert!(Draft.is_unpublished() && PendingPublication.is_unpublished());
        assert!(!Assigned.is_before_selection());
    }

    #[test]
    fn applying_rules_per_state() {
        use ProjectStatus::*;
        for s in [PublishedCurated, Bidding, Published, PendingPublication] {
            assert_eq!(may_apply(s, true, false), Ok(()));
            assert_eq!(may_apply(s, false, false), Err(ApplyRefusal::NotInvited));
        }
        assert_eq!(may_apply(PublishedPrivate, false, true), Ok(()));
        assert_eq!(
            may_apply(PublishedPrivate, true, false),
            Err(ApplyRefusal::NotInvited)
        );
        for s in [
            Draft, Open, Assigned, InProgress, Completed, Disputed, Cancelled,
        ] {
            assert_eq!(may_apply(s, true, true), Err(ApplyRefusal::NotOpen));
        }
    }

    #[test]
    fn milestone_sums_are_exact() {
        // 0.1 + 0.2 + 0.3 = 0.6 exactly, in cents.
        assert_eq!(check_milestone_plan(60, &[10, 20, 30]), Ok(()));
        assert!(check_milestone_plan(61, &[10, 20, 30]).is_err());
        assert!(check_milestone_plan(30, &[10, 20]).is_err());
        assert!(check_milestone_plan(30, &[10, 20, 0]).is_err());
        assert!(check_milestone_plan(i64::MAX, &[i64::MAX, 1, 1]).is_err());
        let err = check_milestone_plan(100, &[10, 20, 30]).unwrap_err();
        assert!(err.contains("0.60") && err.contains("1.00"), "{err}");
    }

    #[test]
    fn deadlines_accept_both_forms() {
        let a = parse_deadline("2030-01-02T03:04:05").unwrap();
        let b = parse_deadline("2030-01-02T03:04:05Z").unwrap();
        let c = parse_deadline("2030-01-02T05:04:05+02:00").unwrap();
        assert_eq!(a, b);
        assert_eq!(b, c);
        assert!(parse_deadline("2030-01-02").is_none());
        assert!(parse_deadline("soon").is_none());
    }

    #[test]
    fn manual_moves() {
        use ProjectStatus::*;
        assert!(manual_move_allowed(Draft, PendingPublication, false));
        assert!(manual_move_allowed(Bidding, Cancelled, false));
        assert!(!manual_move_allowed(Assigned, Cancelled, true));
        assert!(!manual_move_allowed(InProgress, Completed, true));
        assert!(!manual_move_allowed(
            PendingPublication,
            PublishedCurated,
            false
        ));
        assert!(manual_move_allowed(
            PendingPublication,
            PublishedCurated,
            true
        ));
    }

    #[test]
    fn curation_prefers_skills_then_level_and_record() {
        let required = vec!["Rust".to_owned(), "SQL".to_owned()];
        let both = CurationCandidate {
            skills: vec!["rust".into(), "sql".into()],
            level: "Global".into(),
            ..Default::default()
        };
        let one_enterprise = CurationCandidate {
            skills: vec!["Rust".into()],
            level: "Enterprise".into(),
            internal_rating: Some(5.0),
            review_average: Some(5.0),
            review_count: 10,
        };
        let a = curation_score(&required, &both);
        let b = curation_score(&required, &one_enterprise);
        assert_eq!(a.matched_skills, 2);
        assert_eq!(a.total, 57.5);
        assert_eq!(b.total, 25.0 + 20.0 + 15.0 + 15.0);
        let one_review = CurationCandidate {
            review_average: Some(5.0),
            review_count: 1,
            ..both.clone()
        };
        assert_eq!(curation_score(&required, &one_review).reviews, 3.0);
        let accented = CurationCandidate {
            skills: vec![" análisis de datos ".into(), "Rus".into()],
            ..Default::default()
        };
        let required = vec!["Análisis de Datos".to_owned(), "Rust".to_owned()];
        assert_eq!(curation_score(&required, &accented).matched_skills, 1);
    }

    proptest::proptest! {
        /// Skills match as their trimmed, lower-cased names do, in any script: the fast path
        /// for ASCII names answers as the whole folding would.
        #[test]
        fn skills_match_by_trimmed_lower_case(
            a in "[ aAsSσΣςİiéÉß]{0,6}",
            b in "[ aAsSσΣςİiéÉß]{0,6}",
        ) {
            let folded = |s: &str| s.trim().to_lowercase();
            proptest::prop_assert_eq!(same_skill(&a, &b), folded(&a) == folded(&b));
        }
    }

    proptest::proptest! {
        /// No reviews lift a candidate above its ceiling, and the best reviews reach it.
        #[test]
        fn curation_ceiling_bounds_every_record(
            held in 0usize..3,
            level in 0usize..3,
            internal in proptest::option::of(0.0f64..6.0),
            average in proptest::option::of(0.0f64..6.0),
            count in 0i64..12,
        ) {
            let required = vec!["Rust".to_owned(), "SQL".to_owned(), "Go".to_owned()];
            let c = CurationCandidate {
                skills: required[..held].to_vec(),
                level: ["Global", "Pro", "Enterprise"][level].to_owned(),
                internal_rating: internal,
                review_average: average,
                review_count: count,
            };
            let ceiling = curation_ceiling(&required, &c);
            proptest::prop_assert!(curation_score(&required, &c).total <= ceiling);
            let best = CurationCandidate { review_average: Some(5.0), review_count: 5, ..c };
            proptest::prop_assert_eq!(curation_score(&required, &best).total, ceiling);
        }
    }

    proptest::proptest! {
        /// The best `limit` scored from every candidate's reviews are the best `limit` of
        /// those whose ceiling reaches the bar, scored alike: the others' need no reading.
        #[test]
        fn curation_bar_leaves_out_only_who_cannot_rank(
            records in proptest::collection::vec(
                (1usize..4, 0usize..3, proptest::option::of(1u8..=5), 1u8..=5, 0i64..7),
                0..40,
            ),
            limit in 1usize..12,
        ) {
            let required = vec!["Rust".to_owned(), "SQL".to_owned(), "Go".to_owned()];
            let candidates: Vec<CurationCandidate> = records
                .iter()
                .map(|&(held, level, internal, average, count)| CurationCandidate {
                    skills: required[..held].to_vec(),
                    level: ["Global", "Pro", "Enterprise"][level].to_owned(),
                    internal_rating: internal.map(f64::from),
                    review_average: (count > 0).then_some(f64::from(average)),
                    review_count: count,
                })
                .collect();
            let best = |of: Vec<(usize, &CurationCandidate)>| {
                let mut scored: Vec<(f64, usize)> = of
                    .into_iter()
                    .map(|(i, c)| (curation_score(&required, c).total, i))
                    .collect();
                scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                scored.truncate(limit);
                scored
            };
            let bar = curation_bar(&required, &candidates, limit);
            let contenders = candidates
                .iter()
                .enumerate()
                .filter(|(_, c)| curation_contends(&required, c, bar))
                .collect();
            proptest::prop_assert_eq!(best(contenders), best(candidates.iter().enumerate().collect()));
        }
    }

    #[test]
    fn administrators_never_strand_money() {
        use ProjectStatus::*;
        let held = MoneyOnProject {
            in_escrow: 1,
            pending: 0,
        };
        let pending = MoneyOnProject {
            in_escrow: 0,
            pending: 1,
        };
        let none = MoneyOnProject::default();
        assert_eq!(
            admin_move(InProgress, Completed, true, held),
            Err(AdminMoveRefusal::MoneyStranded)
        );
        assert_eq!(
            admin_move(InProgress, Completed, true, pending),
            Err(AdminMoveRefusal::MoneyStranded)
        );
        assert_eq!(admin_move(InProgress, Completed, true, none), Ok(()));
        assert_eq!(
            admin_move(InProgress, Cancelled, true, held),
            Err(AdminMoveRefusal::MoneyStranded)
        );
        assert_eq!(admin_move(Assigned, Cancelled, true, pending), Ok(()));
        assert_eq!(
            admin_move(InProgress, Bidding, true, held),
            Err(AdminMoveRefusal::MoneyStranded)
        );
        assert_eq!(admin_move(Disputed, InProgress, true, held), Ok(()));
        assert_eq!(
            admin_move(Bidding, InProgress, false, none),
            Err(AdminMoveRefusal::InvalidTransition)
        );
        assert_eq!(
            admin_move(Draft, Draft, false, none),
            Err(AdminMoveRefusal::InvalidTransition)
        );
    }
}
