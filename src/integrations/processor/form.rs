//! The processor's request encoding: `application/x-www-form-urlencoded` with bracket
//! notation for nested keys (`metadata[payment_id]=42`, `expand[]=latest_charge`).

use std::collections::BTreeMap;

use url::form_urlencoded;

/// A request body being built, pairs kept in the order added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Form {
    pairs: Vec<(String, String)>,
}

impl Form {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn field(mut self, key: &str, value: impl ToString) -> Self {
        self.pairs.push((key.to_owned(), value.to_string()));
        self
    }

    /// Adds the field only when there is a value.
    pub fn optional(self, key: &str, value: Option<impl ToString>) -> Self {
        match value {
            Some(value) => self.field(key, value),
            None => self,
        }
    }

    /// `key[name]=value` for every entry.
    pub fn map<'a>(
        mut self,
        key: &str,
        entries: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Self {
        for (name, value) in entries {
            self.pairs.push((format!("{key}[{name}]"), value.clone()));
        }
        self
    }

    /// The encoded body. Brackets in keys stay literal (both forms decode the same; the
    /// literal one reads better in logs and tests).
    pub fn encode(&self) -> String {
        self.pairs
            .iter()
            .map(|(k, v)| format!("{}={}", encode_key(k), encode_value(v)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

fn encode_value(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

fn encode_key(key: &str) -> String {
    encode_value(key).replace("%5B", "[").replace("%5D", "]")
}

/// A decoded request body (or query string), for the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormParams {
    pairs: Vec<(String, String)>,
}

impl FormParams {
    pub fn parse(encoded: &[u8]) -> Self {
        Self {
            pairs: form_urlencoded::parse(encoded).into_owned().collect(),
        }
    }

    /// The last value given for `key` (a repeated scalar: the last one wins).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every `key[name]=value` as `name → value`.
    pub fn map(&self, key: &str) -> BTreeMap<String, String> {
        self.pairs
            .iter()
            .filter_map(|(k, v)| Some((nested_name(k, key)?.to_owned(), v.clone())))
            .filter(|(name, _)| !name.is_empty())
            .collect()
    }

    /// Every `key[]=value` or `key[n]=value`, in order.
    pub fn list(&self, key: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| {
                nested_name(k, key).is_some_and(|n| n.is_empty() || n.parse::<usize>().is_ok())
            })
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

/// `metadata[payment_id]` with key `metadata` → `payment_id`.
fn nested_name<'a>(field: &'a str, key: &str) -> Option<&'a str> {
    field
        .strip_prefix(key)?
        .strip_prefix('[')?
        .strip_suffix(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_metadata_uses_bracket_notation() {
        let metadata: BTreeMap<String, String> = [
            ("payment_id".to_owned(), "42".to_owned()),
            ("note".to_owned(), "a&b=c d".to_owned()),
        ]
        .into();
        let form = Form::new()
            .field("amount", 150_000)
            .field("currency", "eur")
            .field("capture_method", "manual")
            .optional("customer", None::<&str>)
            .map("metadata", &metadata)
            .field("expand[]", "latest_charge");
        assert_eq!(
            form.encode(),
            "amount=150000&currency=eur&capture_method=manual&metadata[note]=a%26b%3Dc+d\
             &metadata[payment_id]=42&expand[]=latest_charge"
        );
    }

    #[test]
    fn encoded_forms_decode_back() {
        let metadata: BTreeMap<String, String> =
            [("payment_id".to_owned(), "42".to_owned())].into();
        let form = Form::new()
            .field("amount", 10)
            .map("metadata", &metadata)
            .field("expand[]", "a")
            .field("expand[]", "b");
        let params = FormParams::parse(form.encode().as_bytes());
        assert_eq!(params.get("amount"), Some("10"));
        assert_eq!(params.map("metadata"), metadata);
        assert_eq!(params.list("expand"), vec!["a", "b"]);
        // Percent-encoded brackets (what other clients send) read the same.
        let other = FormParams::parse(b"metadata%5Bpayment_id%5D=42&expand%5B0%5D=x");
        assert_eq!(other.map("metadata"), metadata);
        assert_eq!(other.list("expand"), vec!["x"]);
    }
}
