//! The client's address for rate limits, sessions and logs (`domain::client_address`):
//! forwarding headers are read only from peers in `TRUSTED_PROXIES`.

use actix_web::HttpRequest;
use actix_web::http::header::{FORWARDED, HeaderName};
use actix_web::web;
use std::net::IpAddr;

use crate::domain::client_address::{client_address, parse_forwarded, parse_x_forwarded_for};
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
    // `Forwarded` (RFC 7239) when present, else the de facto `X-Forwarded-For`; several
    // header lines form one list.
    let joined = |name: &HeaderName| {
        let values: Vec<&str> = req
            .headers()
            .get_all(name)
            .filter_map(|v| v.to_str().ok())
            .collect();
        (!values.is_empty()).then(|| values.join(","))
    };
    let chain = joined(&FORWARDED)
        .map(|v| parse_forwarded(&v))
        .or_else(|| joined(&X_FORWARDED_FOR).map(|v| parse_x_forwarded_for(&v)))
        .unwrap_or_default();
    Some(client_address(peer, &chain, trusted))
}
