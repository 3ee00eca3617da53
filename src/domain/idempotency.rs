//! Idempotency keys (issue 34), with Stripe's semantics: the first request with a key runs and
//! its answer is kept; a retry with the same key and the same request gets that answer again
//! and does nothing; the same key with another request, or while the first still runs, is
//! refused. These are the rules; `workflows::idempotency` keeps the keys.

use sha2::{Digest as _, Sha256};

/// The request header naming a key.
pub const HEADER: &str = "Idempotency-Key";
/// The answer header marking a kept answer given again.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";
/// A key is 1 to 255 visible ASCII characters (a UUID is the usual choice).
pub const MAX_KEY_LEN: usize = 255;
/// How long a run holds its key before a retry may take it over, when nothing it did has
/// committed: past any request's own time limits (a crashed run holds it no longer). A run
/// that overstays loses the key safely: its next transaction finds the key taken and stops.
pub const LEASE: chrono::Duration = chrono::Duration::seconds(60);

/// Why a key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to 255 visible ASCII characters")]
pub struct InvalidKey;

/// The key of a request, checked: `raw` is the header's bytes.
pub fn parse_key(raw: &[u8]) -> Result<&str, InvalidKey> {
    let visible = |b: &u8| (0x21..=0x7e).contains(b);
    if raw.is_empty() || raw.len() > MAX_KEY_LEN || !raw.iter().all(visible) {
        return Err(InvalidKey);
    }
    std::str::from_utf8(raw).map_err(|_| InvalidKey)
}

/// The methods a key applies to: those that change something.
pub fn applies_to(method: &str) -> bool {
    matches!(method, "POST" | "PUT" | "PATCH" | "DELETE")
}

/// The longest multipart boundary RFC 2046 allows.
pub const MAX_BOUNDARY_LEN: usize = 70;

/// A `multipart/*` content type whose boundary is longer than [`MAX_BOUNDARY_LEN`]: no client
/// writes one, and the fingerprint would have to search the body for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the multipart boundary must be 1 to 70 characters (RFC 2046)")]
pub struct LongBoundary;

/// What makes two requests "the same" for one key: method, path, query, content type and
/// body, as a hex SHA-256. A multipart body's boundary is left out (clients draw a new one
/// for each attempt), so a retried upload is the same request. Linear in the body: the
/// boundary is found with `memchr`'s substring search, and is at most 70 bytes.
pub fn fingerprint(
    method: &str,
    path: &str,
    query: &str,
    content_type: &str,
    body: &[u8],
) -> Result<String, LongBoundary> {
    let boundary = multipart_boundary(content_type)?;
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    let mut hash = Sha256::new();
    for part in [method, path, query, &essence.to_ascii_lowercase()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    match boundary {
        Some(boundary) => for_each_between(body, boundary.as_bytes(), |piece| hash.update(piece)),
        None => hash.update(body),
    }
    Ok(hex::encode(hash.finalize()))
}

/// The `boundary` parameter of a `multipart/*` content type; refused past
/// [`MAX_BOUNDARY_LEN`].
pub fn multipart_boundary(content_type: &str) -> Result<Option<&str>, LongBoundary> {
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    if !essence.to_ascii_lowercase().starts_with("multipart/") {
        return Ok(None);
    }
    let boundary = parts
        .filter_map(|p| p.split_once('='))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("boundary"))
        .map(|(_, value)| value.trim().trim_matches('"'))
        .filter(|b| !b.is_empty());
    match boundary {
        Some(b) if b.len() > MAX_BOUNDARY_LEN => Err(LongBoundary),
        found => Ok(found),
    }
}

/// Calls `each` with the pieces of `body` between the occurrences of `cut` (and a marker in
/// place of each occurrence, so pieces cannot run together into another body's).
fn for_each_between(body: &[u8], cut: &[u8], mut each: impl FnMut(&[u8])) {
    let mut start = 0;
    for found in memchr::memmem::find_iter(body, cut) {
        // `find_iter` reports non-overlapping occurrences, left to right.
        each(&body[start..found]);
        each(b"\0boundary\0");
        start = found + cut.len();
    }
    each(&body[start..]);
}

/// A kept key as a repeat of its request finds it.
#[derive(Debug, Clone, Copy)]
pub struct Found {
    /// The repeat is the same request (same fingerprint).
    pub same_request: bool,
    /// The first run's answer is kept.
    pub answered: bool,
    /// A transaction of the first run committed.
    pub committed: bool,
    /// The first run's lease is over: it crashed.
    pub lease_over: bool,
}

/// What a repeat of a key gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// The kept answer, again.
    Replay,
    /// 422 `IDEMPOTENCY_KEY_REUSED`: the key was used for another request.
    Reused,
    /// 409 `IDEMPOTENCY_KEY_IN_USE`: the first run is still running.
    InUse,
    /// 409 `IDEMPOTENCY_KEY_INTERRUPTED`: the first run changed data, then stopped (the
    /// process died) before it kept its answer; running it again could do its work twice.
    Interrupted,
    /// The first run stopped having changed nothing: this one runs instead.
    TakeOver,
}

pub fn on_repeat(found: Found) -> Repeat {
    if !found.same_request {
        Repeat::Reused
    } else if found.answered {
        Repeat::Replay
    } else if !found.lease_over {
        Repeat::InUse
    } else if found.committed {
        Repeat::Interrupted
    } else {
        Repeat::TakeOver
    }
}

/// Whether an answer is kept for repeats. Only answers of requests that reached their route's
/// own rules are: not an authentication failure (401), a refused CSRF pair, a rate limit
/// (429), a key's own refusals, nor a server failure (5xx: a retry runs again).
pub fn keeps_answer(status: u16, code: Option<&str>) -> bool {
    match status {
        401 | 429 => false,
        500..=599 => false,
        403 => code != Some("CSRF_FAILED"),
        409 | 422 => !code.is_some_and(|c| c.starts_with("IDEMPOTENCY_KEY_")),
        _ => (200..500).contains(&status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn fp(method: &str, path: &str, query: &str, content_type: &str, body: &[u8]) -> String {
        fingerprint(method, path, query, content_type, body).expect("a short boundary")
    }

    #[test]
    fn keys_are_visible_ascii_up_to_255() {
        assert_eq!(parse_key(b"3f1c-uuid"), Ok("3f1c-uuid"));
        assert_eq!(parse_key(&[b'a'; 255]).map(str::len), Ok(255));
        for bad in [
            &b""[..],
            &[b'a'; 256],
            b"two words",
            b"tab\there",
            "ñ".as_bytes(),
        ] {
            assert_eq!(parse_key(bad), Err(InvalidKey), "{bad:?}");
        }
    }

    #[test]
    fn the_fingerprint_tells_requests_apart() {
        let base = fp("POST", "/api/projects/", "", "application/json", b"{}");
        assert_eq!(
            base,
            fp(
                "POST",
                "/api/projects/",
                "",
                "application/json; charset=utf-8",
                b"{}"
            )
        );
        for other in [
            fp("PUT", "/api/projects/", "", "application/json", b"{}"),
            fp("POST", "/api/projects/1", "", "application/json", b"{}"),
            fp("POST", "/api/projects/", "a=1", "application/json", b"{}"),
            fp("POST", "/api/projects/", "", "text/plain", b"{}"),
            fp("POST", "/api/projects/", "", "application/json", b"{ }"),
            // Parts cannot slide from one field into the next.
            fp("POST", "/api/projects", "/", "application/json", b"{}"),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn a_multipart_boundary_is_not_part_of_the_request() {
        let body = |b: &str| {
            format!(
                "--{b}\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc\r\n--{b}--\r\n"
            )
        };
        let one = fp(
            "POST",
            "/f",
            "",
            "multipart/form-data; boundary=XyZ1",
            body("XyZ1").as_bytes(),
        );
        let two = fp(
            "POST",
            "/f",
            "",
            "multipart/form-data; boundary=\"other-77\"",
            body("other-77").as_bytes(),
        );
        assert_eq!(one, two);
        let changed = body("XyZ1").replace("abc", "abd");
        assert_ne!(
            one,
            fp(
                "POST",
                "/f",
                "",
                "multipart/form-data; boundary=XyZ1",
                changed.as_bytes()
            )
        );
    }

    #[test]
    fn a_boundary_past_rfc_2046s_70_characters_is_refused() {
        let typed = |b: &str| format!("multipart/form-data; boundary={b}");
        let longest = "b".repeat(MAX_BOUNDARY_LEN);
        assert_eq!(
            multipart_boundary(&typed(&longest)),
            Ok(Some(longest.as_str()))
        );
        let over = "b".repeat(MAX_BOUNDARY_LEN + 1);
        assert_eq!(multipart_boundary(&typed(&over)), Err(LongBoundary));
        assert_eq!(
            fingerprint("POST", "/f", "", &typed(&format!("\"{over}\"")), b"x"),
            Err(LongBoundary)
        );
        // Only a multipart type has a boundary to refuse.
        assert_eq!(
            multipart_boundary(&format!("text/plain; boundary={over}")),
            Ok(None)
        );
    }

    #[test]
    fn the_probes_worst_case_body_is_cut_where_its_boundary_stands() {
        // A body of `a`s under a boundary of `a…ab`: the probe's quadratic case.
        let boundary = format!("{}b", "a".repeat(MAX_BOUNDARY_LEN - 1));
        let mut body = vec![b'a'; 1 << 20];
        body.extend_from_slice(boundary.as_bytes());
        body.extend_from_slice(b"tail");
        let mut pieces = Vec::new();
        for_each_between(&body, boundary.as_bytes(), |p| pieces.push(p.len()));
        assert_eq!(pieces, [1 << 20, 10, 4]);
    }

    #[test]
    fn a_repeat_is_answered_by_what_it_finds() {
        let found = |same_request, answered, committed, lease_over| Found {
            same_request,
            answered,
            committed,
            lease_over,
        };
        assert_eq!(on_repeat(found(false, true, true, true)), Repeat::Reused);
        assert_eq!(on_repeat(found(true, true, true, false)), Repeat::Replay);
        assert_eq!(on_repeat(found(true, false, false, false)), Repeat::InUse);
        assert_eq!(on_repeat(found(true, false, true, false)), Repeat::InUse);
        assert_eq!(
            on_repeat(found(true, false, true, true)),
            Repeat::Interrupted
        );
        assert_eq!(on_repeat(found(true, false, false, true)), Repeat::TakeOver);
    }

    #[test]
    fn only_answers_of_the_route_itself_are_kept() {
        for kept in [
            (200, None),
            (201, None),
            (204, None),
            (404, Some("NOT_FOUND")),
        ] {
            assert!(keeps_answer(kept.0, kept.1), "{kept:?}");
        }
        assert!(keeps_answer(403, Some("FORBIDDEN")));
        assert!(keeps_answer(409, Some("INVALID_STATE")));
        assert!(keeps_answer(422, Some("VALIDATION_ERROR")));
        for refused in [
            (401, Some("TOKEN_EXPIRED")),
            (403, Some("CSRF_FAILED")),
            (429, Some("RATE_LIMITED")),
            (409, Some("IDEMPOTENCY_KEY_IN_USE")),
            (422, Some("IDEMPOTENCY_KEY_REUSED")),
            (500, None),
            (503, Some("PROCESSOR_UNAVAILABLE")),
        ] {
            assert!(!keeps_answer(refused.0, refused.1), "{refused:?}");
        }
    }

    proptest! {
        #[test]
        fn any_visible_key_within_bounds_parses(key in "[!-~]{1,255}") {
            prop_assert_eq!(parse_key(key.as_bytes()), Ok(key.as_str()));
        }

        #[test]
        fn cutting_keeps_every_other_byte(body in proptest::collection::vec(any::<u8>(), 0..200), cut in "[a-z]{1,4}") {
            let mut kept = Vec::new();
            for_each_between(&body, cut.as_bytes(), |p| if p != b"\0boundary\0" { kept.extend_from_slice(p) });
            let mut expected = body.clone();
            // Removing every occurrence, left to right, gives the same bytes.
            let mut i = 0;
            while i + cut.len() <= expected.len() {
                if &expected[i..i + cut.len()] == cut.as_bytes() {
                    expected.drain(i..i + cut.len());
                } else {
                    i += 1;
                }
            }
            prop_assert_eq!(kept, expected);
        }
    }
}
