//! CRM synchronisation rules (specification part 9), with no I/O: which tags a contact should
//! carry, the user-type value, the custom fields a profile fills, and the sync-log vocabulary.

use std::collections::BTreeSet;

use serde_json::{Number, Value};

use super::state::state_enum;

pub const TAG_REGISTRATION_INCOMPLETE: &str = "registro-incompleto";
pub const TAG_COMPANY_PENDING: &str = "empresa-pendiente";
pub const TAG_EXPERT_PENDING: &str = "experto-pendiente";
pub const TAG_MARKETING_OPT_IN: &str = "marketing-opt-in";
pub const TAG_COMPANY_PROFILE: &str = "emp-nuevo-registro";
pub const TAG_EXPERT_PROFILE: &str = "exp-solicitud";
pub const TAG_DELETION_REQUESTED: &str = "baja-solicitada";
pub const TAG_DELETION_CONFIRMED: &str = "baja-confirmada";
pub const TAG_USER_DELETED: &str = "usuario-eliminado";
pub const LEVEL_TAGS: [&str; 3] = ["exp-nivel-global", "exp-nivel-pro", "exp-nivel-enterprise"];
pub const SOURCES: [&str; 4] = ["ads", "linkedin", "referral", "web"];

/// The master key: the user's id in the service.
pub const FIELD_ID_PLATFORM: &str = "id_platform";
pub const FIELD_USER_TYPE: &str = "tipo_de_usuario";
pub const FIELD_INTERNAL_RATING: &str = "internal_rating";
/// Custom fields the health check requires the location to define.
pub const REQUIRED_FIELDS: [&str; 2] = [FIELD_ID_PLATFORM, FIELD_USER_TYPE];

/// The eight sync-log event types.
pub const EVENT_TYPES: [&str; 8] = [
    "registration_minimal",
    "profile_enriched",
    "contact_update",
    "tag_add",
    "tag_remove",
    "user_deleted",
    "opportunity_create",
    "opportunity_update",
];

state_enum! {
    /// How one sync-log entry went (`crm_sync_log.status`): done, failed (retried until
    /// [`MAX_RETRIES`]), or skipped because nothing needed sending.
    pub enum SyncStatus {
        Success = "success",
        Failed = "failed",
        Skipped = "skipped",
    }
}

state_enum! {
    /// A CRM opportunity's status (`crm_opportunities.status`), LeadConnector's vocabulary.
    pub enum OpportunityStatus {
        Open = "open",
        Won = "won",
        Lost = "lost",
        Abandoned = "abandoned",
    }
}

/// LeadConnector's do-not-disturb status of a channel (`dndSettings.Email.status`): on when
/// `active`, in any case.
pub fn dnd_is_on(status: &str) -> bool {
    status.eq_ignore_ascii_case("active")
}

/// Attempts of a failed entry after which the retry scheduler gives up.
pub const MAX_RETRIES: i64 = 5;
/// Failed entries replayed per retry cycle.
pub const RETRY_BATCH: i64 = 10;

/// The profile of one role, as far as the CRM sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileFacts {
    /// `empresa` or `experto`.
    pub profile_type: String,
    pub expert_level: String,
    pub full_name: Option<String>,
    pub phone: Option<String>,
    pub location: Option<String>,
    pub company_name: Option<String>,
    pub company_website: Option<String>,
    pub contact_person: Option<String>,
    pub company_type: Option<String>,
    pub industry: Option<String>,
    pub company_size: Option<String>,
    pub preferred_language: Option<String>,
    pub company_email: Option<String>,
    pub main_area: Option<String>,
    pub work_language: Option<String>,
    pub experience_years: Option<i64>,
    pub portfolio_url: Option<String>,
    pub linkedin_url: Option<String>,
    pub hourly_rate_minor: Option<i64>,
    pub internal_rating: Option<f64>,
}

/// Everything the CRM contact of a user is derived from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UserFacts {
    pub user_id: i64,
    pub email: String,
    pub username: String,
    /// Marketplace roles (`empresa`, `experto`), in the order they were added.
    pub roles: Vec<String>,
    pub accept_marketing: bool,
    pub source: Option<String>,
    pub crm_id: Option<String>,
    pub deletion_requested: bool,
    pub deletion_confirmed: bool,
    pub profiles: Vec<ProfileFacts>,
}

impl UserFacts {
    fn profile(&self, kind: &str) -> Option<&ProfileFacts> {
        self.profiles.iter().find(|p| p.profile_type == kind)
    }
}

/// `src-<source>` for a known registration source; anything else counts as the web form.
pub fn source_tag(source: Option<&str>) -> String {
    let source = source.map(str::to_ascii_lowercase);
    match source.as_deref() {
        Some(s) if SOURCES.contains(&s) => format!("src-{s}"),
        _ => "src-web".to_owned(),
    }
}

/// The pending tag of a role that has no profile yet.
pub fn pending_tag(role: &str) -> Option<&'static str> {
    match role {
        "empresa" => Some(TAG_COMPANY_PENDING),
        "experto" => Some(TAG_EXPERT_PENDING),
        _ => None,
    }
}

/// The tag a created profile of this type gives.
pub fn profile_tag(profile_type: &str) -> Option<&'static str> {
    match profile_type {
        "empresa" => Some(TAG_COMPANY_PROFILE),
        "experto" => Some(TAG_EXPERT_PROFILE),
        _ => None,
    }
}

/// `exp-nivel-global|pro|enterprise` for a level (`Global`, `Pro`, `Enterprise`).
pub fn level_tag(level: &str) -> Option<&'static str> {
    match level.to_ascii_lowercase().as_str() {
        "global" => Some(LEVEL_TAGS[0]),
        "pro" => Some(LEVEL_TAGS[1]),
        "enterprise" => Some(LEVEL_TAGS[2]),
        _ => None,
    }
}

/// The tags a fresh registration carries.
pub fn registration_tags(
    roles: &[String],
    accept_marketing: bool,
    source: Option<&str>,
) -> Vec<String> {
    let mut tags = vec![TAG_REGISTRATION_INCOMPLETE.to_owned()];
    tags.extend(
        roles
            .iter()
            .filter_map(|r| pending_tag(r))
            .map(str::to_owned),
    );
    if accept_marketing {
        tags.push(TAG_MARKETING_OPT_IN.to_owned());
    }
    tags.push(source_tag(source));
    tags
}

/// The tags the contact of `user` should carry now (the managed families only; tags added by
/// hand in the CRM or through the tag endpoint are not part of it).
pub fn expected_tags(user: &UserFacts) -> BTreeSet<String> {
    let mut tags = BTreeSet::new();
    let mut any_profile = false;
    for role in &user.roles {
        match user.profile(role) {
            Some(profile) => {
                any_profile = true;
                tags.extend(profile_tag(role).map(str::to_owned));
                if role == "experto" {
                    tags.extend(level_tag(&profile.expert_level).map(str::to_owned));
                }
            }
            None => tags.extend(pending_tag(role).map(str::to_owned)),
        }
    }
    if !any_profile {
        tags.insert(TAG_REGISTRATION_INCOMPLETE.to_owned());
    }
    if user.accept_marketing {
        tags.insert(TAG_MARKETING_OPT_IN.to_owned());
    }
    tags.insert(source_tag(user.source.as_deref()));
    if user.deletion_requested {
        tags.insert(TAG_DELETION_REQUESTED.to_owned());
    }
    if user.deletion_confirmed {
        tags.insert(TAG_DELETION_CONFIRMED.to_owned());
    }
    tags
}

/// Tags a profile of `profile_type` replaces: the registration tags that no longer hold.
pub fn tags_replaced_by_profile(user: &UserFacts, profile_type: &str) -> Vec<String> {
    let mut gone: Vec<String> = pending_tag(profile_type)
        .into_iter()
        .map(str::to_owned)
        .collect();
    gone.push(TAG_REGISTRATION_INCOMPLETE.to_owned());
    // A second role still waiting for its profile keeps its own pending tag.
    gone.retain(|t| !expected_tags(user).contains(t));
    gone
}

/// `tipo_de_usuario`: `empresa`, `experto`, or `empresa_experto` for both.
pub fn user_type(roles: &[String]) -> Option<String> {
    let company = roles.iter().any(|r| r == "empresa");
    let expert = roles.iter().any(|r| r == "experto");
    match (company, expert) {
        (true, true) => Some("empresa_experto".into()),
        (true, false) => Some("empresa".into()),
        (false, true) => Some("experto".into()),
        (false, false) => None,
    }
}

/// Minor units as a JSON number with two decimals' precision (`12345` → `123.45`).
pub fn minor_to_number(minor: i64) -> Value {
    let decimal = rust_decimal::Decimal::new(minor, 2);
    decimal
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// The custom fields (by key, without `contact.`) the user's state fills, master key first.
pub fn custom_field_values(user: &UserFacts, with_rating: bool) -> Vec<(&'static str, Value)> {
    let mut fields: Vec<(&'static str, Value)> =
        vec![(FIELD_ID_PLATFORM, Value::from(user.user_id.to_string()))];
    if let Some(kind) = user_type(&user.roles) {
        fields.push((FIELD_USER_TYPE, Value::from(kind)));
    }
    let mut text = |key: &'static str, value: &Option<String>| {
        if let Some(v) = value.as_deref().filter(|v| !v.is_empty())
            && !fields.iter().any(|(k, _)| *k == key)
        {
            fields.push((key, Value::from(v)));
        }
    };
    for p in &user.profiles {
        text("location", &p.location);
        text("contact_person", &p.contact_person);
        text("company_type", &p.company_type);
        text("industry", &p.industry);
        text("company_size", &p.company_size);
        text("preferred_language", &p.preferred_language);
        text("company_email", &p.company_email);
        text("main_area", &p.main_area);
        text("work_language", &p.work_language);
        text("portfolio_url", &p.portfolio_url);
        text("linkedin_url", &p.linkedin_url);
    }
    for p in &user.profiles {
        if let Some(years) = p.experience_years {
            fields.push(("experience_years", Value::from(years)));
        }
        if let Some(rate) = p.hourly_rate_minor {
            fields.push(("hourly_rate", minor_to_number(rate)));
        }
        if with_rating && let Some(rating) = p.internal_rating.and_then(Number::from_f64) {
            fields.push((FIELD_INTERNAL_RATING, Value::Number(rating)));
        }
    }
    fields
}

/// Standard contact fields of an enriched contact (`phone`, `companyName`, `website`, names).
pub fn standard_fields(user: &UserFacts) -> serde_json::Map<String, Value> {
    let mut out = serde_json::Map::new();
    out.insert("email".into(), Value::from(user.email.clone()));
    let first = |f: fn(&ProfileFacts) -> Option<&String>| {
        user.profiles
            .iter()
            .find_map(|p| f(p).filter(|v| !v.is_empty()).cloned())
    };
    if let Some(name) = first(|p| p.full_name.as_ref()) {
        out.insert("name".into(), Value::from(name));
    } else {
        out.insert("name".into(), Value::from(user.username.clone()));
    }
    if let Some(phone) = first(|p| p.phone.as_ref()) {
        out.insert("phone".into(), Value::from(phone));
    }
    if let Some(company) = first(|p| p.company_name.as_ref()) {
        out.insert("companyName".into(), Value::from(company));
    }
    if let Some(site) = first(|p| p.company_website.as_ref()) {
        out.insert("website".into(), Value::from(site));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(roles: &[&str]) -> UserFacts {
        UserFacts {
            user_id: 7,
            email: "a@b.test".into(),
            username: "ana".into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            source: Some("LinkedIn".into()),
            ..Default::default()
        }
    }

    #[test]
    fn registration_tags_name_pending_roles_marketing_and_source() {
        let tags = registration_tags(&["experto".into()], true, Some("ads"));
        assert_eq!(
            tags,
            [
                "registro-incompleto",
                "experto-pendiente",
                "marketing-opt-in",
                "src-ads"
            ]
        );
        assert_eq!(
            registration_tags(&["empresa".into()], false, None)
                .last()
                .unwrap(),
            "src-web"
        );
        assert_eq!(source_tag(Some("unknown")), "src-web");
    }

    #[test]
    fn a_profile_replaces_registration_tags_and_sets_one_level() {
        let mut u = user(&["experto", "empresa"]);
        u.profiles.push(ProfileFacts {
            profile_type: "experto".into(),
            expert_level: "Pro".into(),
            ..Default::default()
        });
        let tags: Vec<_> = expected_tags(&u).into_iter().collect();
        assert_eq!(
            tags,
            [
                "empresa-pendiente",
                "exp-nivel-pro",
                "exp-solicitud",
                "src-linkedin"
            ]
        );
        // The company role still waits for its profile: only the expert's pending tag goes.
        assert_eq!(
            tags_replaced_by_profile(&u, "experto"),
            ["experto-pendiente", "registro-incompleto"]
        );
        assert_eq!(user_type(&u.roles).unwrap(), "empresa_experto");
    }

    #[test]
    fn decimals_are_json_numbers() {
        assert_eq!(minor_to_number(12_345), serde_json::json!(123.45));
        assert_eq!(minor_to_number(100), serde_json::json!(1.0));
        let mut u = user(&["experto"]);
        u.profiles.push(ProfileFacts {
            profile_type: "experto".into(),
            hourly_rate_minor: Some(5_050),
            ..Default::default()
        });
        let fields = custom_field_values(&u, false);
        assert_eq!(fields[0], ("id_platform", Value::from("7")));
        assert!(fields.contains(&("hourly_rate", serde_json::json!(50.5))));
    }
}
