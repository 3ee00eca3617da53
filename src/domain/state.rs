//! States as types: [`state_enum!`] declares the enum of one state column, stored as the
//! text the column has always held (no data migration), so rows hold the enum and binds
//! take it on both engines.

/// A state column's enum, as [`state_enum!`] declares it: what code generic over states
/// (the store's conditional updates, the architecture checks) needs.
pub trait State: Copy + Eq + std::fmt::Debug + Send + Sync + 'static {
    /// The enum's name, e.g. `PaymentStatus`.
    const NAME: &'static str;
    /// The stored text.
    fn text(self) -> &'static str;
}

/// A state column with declared moves: the store's transitions refuse any other before they
/// reach the database, and each move is also guarded in SQL by the state it starts from.
pub trait Lifecycle: State {
    fn can_move_to(self, next: Self) -> bool;
}

/// A move a [`Lifecycle`] does not allow: a bug in the workflow that asked for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} may not move from `{from}` to `{to}`")]
pub struct IllegalMove {
    pub kind: &'static str,
    pub from: &'static str,
    pub to: &'static str,
}

/// `Ok` when `from` may move to `to`.
pub fn check_move<S: Lifecycle>(from: S, to: S) -> Result<(), IllegalMove> {
    if from.can_move_to(to) {
        Ok(())
    } else {
        Err(IllegalMove {
            kind: S::NAME,
            from: from.text(),
            to: to.text(),
        })
    }
}

/// A stored text that names no state of the column's enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a {kind}")]
pub struct UnknownState {
    /// The enum's name, e.g. `PaymentStatus`.
    pub kind: &'static str,
    pub text: String,
}

/// The value another system's word names in `words`, or `other` for a word not listed: for a
/// vocabulary that system owns and may grow (the processor's), unlike our own states, which
/// [`state_enum!`] refuses to read when unknown.
pub fn word_of<T: Copy>(words: &[(&str, T)], word: &str, other: T) -> T {
    words
        .iter()
        .find(|(w, _)| *w == word)
        .map_or(other, |&(_, value)| value)
}

/// Declares a state enum with its texts:
///
/// ```ignore
/// state_enum! {
///     /// A payment's state.
///     pub enum PaymentStatus {
///         Pending = "pending",
///         Held = "held",
///     }
/// }
/// ```
///
/// It gets `ALL` (in declaration order), `as_str`, `parse`, `FromStr`, `Display`, serde as
/// the text (the JSON the API has always answered with) and sqlx's `Type`, `Encode` and
/// `Decode` for every engine whose text does (PostgreSQL and SQLite).
macro_rules! state_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every state, in declaration order.
            pub const ALL: [$name; [$(stringify!($variant)),+].len()] = [$(Self::$variant),+];

            /// The stored text.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }

            /// The state a stored text names, if any.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }

        impl $crate::domain::state::State for $name {
            const NAME: &'static str = stringify!($name);

            fn text(self) -> &'static str {
                self.as_str()
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::domain::state::UnknownState;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Self::parse(text).ok_or_else(|| $crate::domain::state::UnknownState {
                    kind: stringify!($name),
                    text: text.to_owned(),
                })
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str>>::deserialize(d)?;
                text.parse().map_err(::serde::de::Error::custom)
            }
        }

        impl<DB: ::sqlx::Database> ::sqlx::Type<DB> for $name
        where
            str: ::sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as ::sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as ::sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: ::sqlx::Database> ::sqlx::Encode<'q, DB> for $name
        where
            &'static str: ::sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as ::sqlx::Database>::ArgumentBuffer,
            ) -> Result<::sqlx::encode::IsNull, ::sqlx::error::BoxDynError> {
                <&'static str as ::sqlx::Encode<'q, DB>>::encode(self.as_str(), buf)
            }
        }

        impl<'r, DB: ::sqlx::Database> ::sqlx::Decode<'r, DB> for $name
        where
            &'r str: ::sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as ::sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, ::sqlx::error::BoxDynError> {
                let text = <&'r str as ::sqlx::Decode<'r, DB>>::decode(value)?;
                Ok(text.parse::<Self>()?)
            }
        }
    };
}

pub(crate) use state_enum;

#[cfg(test)]
mod tests {
    state_enum! {
        /// A state machine of two states, for the macro's own checks.
        pub enum Lamp {
            Off = "off",
            On = "on_now",
        }
    }

    #[test]
    fn texts_round_trip() {
        for s in Lamp::ALL {
            assert_eq!(Lamp::parse(s.as_str()), Some(s));
            assert_eq!(s.to_string().parse::<Lamp>(), Ok(s));
        }
        assert_eq!(Lamp::On.as_str(), "on_now");
        let err = "dim".parse::<Lamp>().unwrap_err();
        assert_eq!(err.to_string(), "`dim` is not a Lamp");
    }

    #[test]
    fn serde_is_the_text() {
        assert_eq!(serde_json::to_string(&Lamp::On).unwrap(), "\"on_now\"");
        assert_eq!(serde_json::from_str::<Lamp>("\"off\"").unwrap(), Lamp::Off);
        assert!(serde_json::from_str::<Lamp>("\"Off\"").is_err());
    }
}
