//! Routes and the access table (ARCHITECTURE.md, "Where a new part's files go"): each module
//! mounts its own routes, and `src/http/routes/access.txt` has exactly one row per mounted
//! operation.

use super::sources;
use crate::access_table::{coverage_problems, operations, rows};

/// Every mounted operation has one row saying who may call it, and every row names a mounted
/// operation. The operations are those of the OpenAPI document `/openapi.json` serves (every
/// mounted route is in it: utoipa-actix-web mounts only documented handlers), built here
/// without a server.
#[test]
fn the_access_table_has_one_row_per_mounted_operation() {
    let doc = serde_json::to_value(marketplace::startup::openapi_document())
        .expect("the OpenAPI document as JSON");
    let mounted = operations(&doc);
    assert!(
        mounted.len() > 150,
        "the OpenAPI document lists {} operations",
        mounted.len()
    );
    let problems = coverage_problems(&rows(), &mounted);
    assert!(
        problems.is_empty(),
        "src/http/routes/access.txt and the mounted routes differ:\n{}",
        problems.join("\n")
    );
}

/// A module's `mount` names its own handlers only (`.service(handler)`, no path), so a route is
/// mounted beside its handler and `http::configure` lists modules, not routes.
#[test]
fn each_module_mounts_its_own_handlers() {
    let mut offences = Vec::new();
    for file in sources("http") {
        for (n, line) in file.text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find(".service(") {
                rest = &rest[at + ".service(".len()..];
                let handler = rest.split(')').next().unwrap_or_default();
                if handler.contains("::") {
                    offences.push(format!("{}:{}: {}", file.path, n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "routes mounted away from their module (mount them in the handler's own `mount`):\n{}",
        offences.join("\n")
    );
}

/// Every mutating route that authenticates its caller takes `CsrfChecked` or `AdminUser`
/// (both run the session-bound double submit for cookie sessions), never a bare `AuthUser`: a
/// cookie session's browser must not be made to post without the header.
#[test]
fn every_mutating_route_checks_csrf() {
    let mut offences = Vec::new();
    let mut mutating = 0;
    for file in sources("http/routes") {
        let mut rest = file.text.as_str();
        while let Some(at) = ["#[post(", "#[put(", "#[patch(", "#[delete("]
            .iter()
            .filter_map(|attribute| rest.find(attribute))
            .min()
        {
            rest = &rest[at..];
            let route = rest.split(')').next().unwrap_or_default().to_owned();
            // The handler's parameters: from its `fn` to the `->` of its answer.
            let signature = rest
                .split_once("fn ")
                .map(|(_, s)| s.split("->").next().unwrap_or_default())
                .unwrap_or_default();
            mutating += 1;
            if signature.contains(": AuthUser") {
                offences.push(format!("{}: {route})]", file.path));
            }
            rest = &rest[1..];
        }
    }
    assert!(mutating > 100, "only {mutating} mutating routes found");
    assert!(
        offences.is_empty(),
        "mutating routes without the CSRF check (take `CsrfChecked`):\n{}",
        offences.join("\n")
    );
}
