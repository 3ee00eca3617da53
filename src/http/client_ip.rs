//! The client's address for rate limits, sessions and logs (`domain::client_address`):
//! `X-Forwarded-For` is read only from peers in `TRUSTED_PROXIES`. Only that header: every
//! common proxy appends to it, while one that does not write RFC 7239's `Forwarded` would pass
//! a client's own `Forwarded` through, and reading it would let the client pick its address.
//!
//! Limits count [`client_key`], the IPv4 address or IPv6 /64; sessions and logs keep the
//! whole address.

use actix_web::HttpRequest;
use actix_web::http::header::HeaderName;
use actix_web::web;
use std::net::IpAddr;

use crate::domain::client_address::{ClientKey, client_address, parse_x_forwarded_for};
use crate::state::AppState;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

pub fn client_ip(req: &HttpRequest) -> Option<IpAddr> {
    let peer = req.peer_addr()?.ip();
    let trusted = req
        .app_data::<web::Data<AppState>>()
        .map(|state| state.settings.trusted_proxies.as_slice())
        .unwrap_or_default();
    if trusted.is_empty() {
        return Some(peer);
    }
    // Several header lines form one list.
    let values: Vec<&str> = req
        .headers()
        .get_all(&X_FORWARDED_FOR)
        .filter_map(|v| v.to_str().ok())
        .collect();
    let chain = parse_x_forwarded_for(&values.join(","));
    Some(client_address(peer, &chain, trusted))
}

/// The client a per-address limit counts for this request; without a peer address (a request
/// not over TCP) every such request shares the `unknown` budget.
pub fn client_key(req: &HttpRequest) -> ClientKey {
    client_ip(req).map_or(ClientKey::Unknown, ClientKey::of)
}
