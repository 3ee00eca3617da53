//! Users: roles and the rules for e-mail addresses, usernames and passwords. Values are parsed
//! once at the edge and cannot hold invalid data afterwards.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::state::state_enum;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, PartialOrd, Ord,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Empresa,
    Experto,
    Admin,
}

impl Role {
    /// Every role, in declaration order.
    pub const ALL: [Role; 3] = [Role::Empresa, Role::Experto, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Empresa => "empresa",
            Role::Experto => "experto",
            Role::Admin => "admin",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "empresa" => Some(Role::Empresa),
            "experto" => Some(Role::Experto),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    /// Roles a person may pick for themselves; `admin` is only given by an administrator or
    /// an invitation.
    pub fn self_selectable(self) -> bool {
        !matches!(self, Role::Admin)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A syntactically valid e-mail address, lower-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailAddress(String);

impl EmailAddress {
    pub fn parse(raw: &str) -> Result<Self, &'static str> {
        let value = raw.trim().to_lowercase();
        let (local, domain) = value.split_once('@').ok_or("is not an e-mail address")?;
        let valid = value.len() <= 254
            && !local.is_empty()
            && local.len() <= 64
            && domain.contains('.')
            && !domain.starts_with('.')
            && !domain.ends_with('.')
            && !domain.contains("..")
            && !value.chars().any(|c| c.is_whitespace() || c.is_control())
            && !domain.contains('@')
            && domain
                .chars()
                .all(|c| c.is_alphanumeric() || c == '-' || c == '.');
        if valid {
            Ok(Self(value))
        } else {
            Err("is not an e-mail address")
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_inner(self) -> String {
        self.0
    }
}

/// 3 to 50 letters, digits or `_`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Username(String);

impl Username {
    pub fn parse(raw: &str) -> Result<Self, &'static str> {
        let value = raw.trim();
        let len = value.chars().count();
        if !(3..=50).contains(&len) {
            return Err("must be 3 to 50 characters");
        }
        if !value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err("may contain only letters, digits and _");
        }
        Ok(Self(value.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_inner(self) -> String {
        self.0
    }
}

/// Checks the password policy: at least 8 characters with an upper-case letter, a lower-case
/// letter, a digit and a special character. At most 72 bytes, bcrypt's limit, so no two
/// passwords differing after byte 72 ever share a hash.
pub fn check_password_policy(password: &str) -> Result<(), &'static str> {
    if password.chars().count() < 8 {
        return Err("must be at least 8 characters");
    }
    if password.len() > 72 {
        return Err("must be at most 72 bytes");
    }
    let upper = password.chars().any(char::is_uppercase);
    let lower = password.chars().any(char::is_lowercase);
    let digit = password.chars().any(|c| c.is_ascii_digit());
    let special = password.chars().any(|c| !c.is_alphanumeric());
    if upper && lower && digit && special {
        Ok(())
    } else {
        Err(
            "must contain an upper-case letter, a lower-case letter, a digit and a special character",
        )
    }
}

state_enum! {
    /// An account's standing as administrators see it, derived from its dates and flag.
    pub enum AccountStatus {
        Active = "active",
        Inactive = "inactive",
        Suspended = "suspended",
        Deleted = "deleted",
    }
}

state_enum! {
    /// An administrators' invitation, derived from its flag and expiry: open (`pending`),
    /// taken (`used`) or run out (`expired`).
    pub enum InvitationStatus {
        Pending = "pending",
        Used = "used",
        Expired = "expired",
    }
}

impl AccountStatus {
    /// Deleted before suspended before the active flag.
    pub fn of(deleted: bool, suspended: bool, active: bool) -> Self {
        if deleted {
            Self::Deleted
        } else if suspended {
            Self::Suspended
        } else if active {
            Self::Active
        } else {
            Self::Inactive
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emails() {
        assert_eq!(
            EmailAddress::parse(" Ana@Example.COM ").unwrap().as_str(),
            "ana@example.com"
        );
        for bad in [
            "",
            "ana",
            "ana@",
            "@x.com",
            "ana@x",
            "a b@x.com",
            "ana@x..com",
            "ana@@x.com",
            "ana@.x.com",
        ] {
            assert!(EmailAddress::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn usernames() {
        assert!(Username::parse("ana_01").is_ok());
        assert!(Username::parse("ab").is_err());
        assert!(Username::parse(&"a".repeat(51)).is_err());
        assert!(Username::parse("ana-01").is_err());
        assert!(Username::parse("ána").is_err());
    }

    #[test]
    fn password_policy() {
        assert!(check_password_policy("Secret1!").is_ok());
        for bad in [
            "Sec1!",
            "secret1!",
            "SECRET1!",
            "Secret!!",
            "Secret12",
            &format!("Aa1!{}", "x".repeat(70)),
        ] {
            assert!(check_password_policy(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn roles() {
        assert_eq!(Role::parse("experto"), Some(Role::Experto));
        assert_eq!(Role::parse("root"), None);
        assert!(!Role::Admin.self_selectable());
        assert_eq!(
            serde_json::to_string(&Role::Empresa).unwrap(),
            "\"empresa\""
        );
    }
}
