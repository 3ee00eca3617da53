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

/// OpenAPI names a component by its Rust type's name: two request bodies of one name would
/// share one documented schema (the later overwrites the earlier), so every type the document
/// describes has a name of its own (or its own `#[schema(as = …)]`).
#[test]
fn every_documented_type_has_its_own_name() {
    let mut names: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for file in sources("") {
        let mut rest = file.text.as_str();
        while let Some(at) = rest.find("#[derive(") {
            rest = &rest[at + "#[derive(".len()..];
            let derives = rest.split(')').next().unwrap_or_default();
            if !derives.contains("ToSchema") {
                continue;
            }
            // The attributes between the derive and the item, then the item's name.
            let item = rest
                .find("pub struct ")
                .into_iter()
                .chain(rest.find("pub enum "))
                .min()
                .unwrap_or(rest.len());
            let attributes = &rest[..item];
            let declared = rest[item..]
                .split_whitespace()
                .nth(2)
                .unwrap_or_default()
                .trim_end_matches(['{', '<', '(', ';'])
                .to_owned();
            let name = attributes
                .split("as = ")
                .nth(1)
                .and_then(|s| s.split([')', ',']).next())
                .map(|s| s.trim().rsplit("::").next().unwrap_or_default().to_owned())
                .unwrap_or(declared);
            names.entry(name).or_default().push(file.path.clone());
        }
    }
    assert!(
        names.len() > 100,
        "only {} documented types found",
        names.len()
    );
    let shared: Vec<String> = names
        .iter()
        .filter(|(_, files)| files.len() > 1)
        .map(|(name, files)| format!("{name}: {}", files.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "types documented under one name (rename one, or give it `#[schema(as = …)]`):\n{}",
        shared.join("\n")
    );
}

/// Each operation documents the body its handler parses: the `request_body` of its
/// `#[utoipa::path]` names the type of its `web::Json<…>` parameter.
#[test]
fn each_operation_documents_the_body_its_handler_parses() {
    let (mut checked, mut offences) = (0, Vec::new());
    for file in sources("http/routes") {
        for block in file.text.split("#[utoipa::path(").skip(1) {
            let (attribute, handler) = block.split_once("pub async fn ").unwrap_or_default();
            let parameters = handler.split("->").next().unwrap_or_default();
            let parsed = parameters
                .split("web::Json<")
                .nth(1)
                .map(|s| s.split('>').next().unwrap_or_default().trim().to_owned());
            let documented = attribute.split("request_body").nth(1).map(|s| {
                let s = s.trim_start_matches([' ', '=', '(']).trim_start();
                let s = s.strip_prefix("content = ").unwrap_or(s);
                let s = s.strip_prefix("Option<").unwrap_or(s);
                s.split([',', ')', '>', '\n'])
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_owned()
            });
            let name = handler.split('(').next().unwrap_or_default();
            match (parsed, documented) {
                (Some(parsed), Some(documented)) => {
                    checked += 1;
                    if parsed != documented {
                        offences.push(format!(
                            "{}: {name} parses {parsed}, documents {documented}",
                            file.path
                        ));
                    }
                }
                (Some(parsed), None) => offences.push(format!(
                    "{}: {name} parses {parsed} and documents no body",
                    file.path
                )),
                _ => {}
            }
        }
    }
    assert!(checked > 60, "only {checked} bodies checked");
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}
