//! What may import what (ARCHITECTURE.md, "Layers and what may import what").

use std::collections::{BTreeMap, BTreeSet};

use super::{Source, sources};

/// `domain` holds pure types and rules: it names no other part of the service.
#[test]
fn domain_imports_nothing_of_the_service() {
    let offences = naming(&sources("domain"), |part| part != "domain");
    assert!(
        offences.is_empty(),
        "domain imports the service:\n{}",
        offences.join("\n")
    );
}

/// `store` and `integrations` are the service's edges: beside `domain` they take only the
/// small leaves `config` (settings), `clock` and `availability` (whether a dependency
/// answers), and each other never: no use case, route or state.
#[test]
fn store_and_integrations_import_domain_config_and_clock_only() {
    for (layer, itself) in [("store", "store"), ("integrations", "integrations")] {
        let offences = naming(&sources(layer), |part| {
            !matches!(part, "domain" | "config" | "clock" | "availability") && part != itself
                // `#[macro_export]` macros live at the crate root (`crate::on_exec!`).
                && !is_store_macro(part)
        });
        assert!(
            offences.is_empty(),
            "{layer} imports more than domain, config, clock and availability:\n{}",
            offences.join("\n")
        );
    }
}

/// `config` (settings), `clock` and `availability` are leaves every layer may take: they
/// import `domain` at most.
#[test]
fn config_clock_and_availability_import_domain_at_most() {
    const LEAVES: [&str; 3] = ["src/config.rs", "src/clock.rs", "src/availability.rs"];
    let leaves: Vec<Source> = sources("")
        .into_iter()
        .filter(|file| LEAVES.contains(&file.path.as_str()))
        .collect();
    assert_eq!(leaves.len(), LEAVES.len(), "{LEAVES:?}");
    let offences = naming(&leaves, |part| part != "domain");
    assert!(
        offences.is_empty(),
        "config, clock or availability import the service:\n{}",
        offences.join("\n")
    );
}

/// `state` holds handles of the layers below the workflows: it names no workflow, route,
/// nor the start-up above them, so every workflow can take it.
#[test]
fn state_imports_no_workflow() {
    let state: Vec<Source> = sources("")
        .into_iter()
        .filter(|file| file.path == "src/state.rs")
        .collect();
    assert_eq!(state.len(), 1, "src/state.rs");
    let offences = naming(&state, |part| {
        matches!(
            part,
            "workflows" | "http" | "startup" | "background" | "demo"
        )
    });
    assert!(
        offences.is_empty(),
        "state imports a layer above it:\n{}",
        offences.join("\n")
    );
}

/// Use cases are below the routes: `workflows` never name `http` (nor the start-up that
/// wires them, nor the list of loops that calls them, nor the demo data built on them).
#[test]
fn workflows_never_import_http() {
    let offences = naming(&sources("workflows"), |part| {
        matches!(part, "http" | "startup" | "background" | "demo")
    });
    assert!(
        offences.is_empty(),
        "workflows import the routes:\n{}",
        offences.join("\n")
    );
}

/// The workflow modules (a file or a folder directly under `src/workflows/`) import each
/// other without a circle, so each can be read, and changed, knowing only those below it.
#[test]
fn workflow_modules_import_each_other_without_a_circle() {
    let graph = workflow_imports(&sources("workflows"));
    let circles = circles(&graph);
    assert!(
        circles.is_empty(),
        "workflow modules import each other in a circle:\n{}",
        circles.join("\n")
    );
}

/// `crate::<part>` names in `files` for which `offends(part)`, as `path:line: text`.
fn naming(files: &[Source], offends: impl Fn(&str) -> bool) -> Vec<String> {
    let mut offences = Vec::new();
    for file in files {
        for (n, line) in code_lines(&file.text) {
            for part in crate_parts(line) {
                if offends(part) {
                    offences.push(format!("{}:{}: {}", file.path, n + 1, line.trim()));
                }
            }
        }
    }
    offences
}

fn is_store_macro(part: &str) -> bool {
    part == "on_exec"
}

/// Lines of code with their index, comments left out (a doc may name any part).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
}

/// The first segment after each `crate::` on `line`.
fn crate_parts(line: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        parts.push(ident(rest));
    }
    parts
}

/// The identifier `text` starts with.
fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The workflow module a file under `src/workflows/` belongs to, and its module path below
/// `workflows` (`escrow/release.rs` is in `escrow`, at `["escrow", "release"]`).
fn module_of(path: &str) -> Option<(String, Vec<String>)> {
    let below = path.strip_prefix("src/workflows/")?.strip_suffix(".rs")?;
    let mut segments: Vec<String> = below.split('/').map(str::to_owned).collect();
    if segments.last().is_some_and(|last| last == "mod") {
        segments.pop();
    }
    let module = segments.first()?.clone();
    Some((module, segments))
}

/// Which workflow modules each workflow module names: `crate::workflows::x` (also inside
/// `crate::workflows::{x, y::z}`), and `super::x` where that `super` is `workflows`.
fn workflow_imports(files: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some((module, segments)) = module_of(&file.path) else {
            continue; // `workflows/mod.rs` declares the modules
        };
        let named = graph.entry(module.clone()).or_default();
        for (_, line) in code_lines(&file.text) {
            for target in workflow_names(line, segments.len()) {
                if target != module {
                    named.insert(target);
                }
            }
        }
    }
    // Only names that are modules: `crate::workflows::{self, …}` and the like are not.
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for named in graph.values_mut() {
        named.retain(|name| modules.contains(name));
    }
    graph
}

/// The workflow modules `line` names, in a file `depth` modules below `workflows`.
fn workflow_names(line: &str, depth: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::workflows::") {
        rest = &rest[at + "crate::workflows::".len()..];
        names.extend(first_segments(rest));
    }
    // `super::` repeated `depth` times is `workflows` itself.
    let up = "super::".repeat(depth);
    let mut rest = line;
    while let Some(at) = rest.find(&up) {
        let before = &rest[..at];
        rest = &rest[at + up.len()..];
        // A longer chain of `super::` reaches past `workflows`; a path ending `x::super::`
        // is not one.
        if before.ends_with("::") || rest.starts_with("super::") {
            continue;
        }
        names.extend(first_segments(rest));
    }
    names
}

/// The first segment of a path, or of each path in a `{…}` group.
fn first_segments(text: &str) -> Vec<String> {
    let Some(group) = text.strip_prefix('{') else {
        return vec![ident(text).to_owned()];
    };
    let mut names = Vec::new();
    let mut depth = 0;
    let mut start = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start = true,
            c if start && !c.is_whitespace() => {
                names.push(ident(&group[i..]).to_owned());
                start = false;
            }
            _ => {}
        }
    }
    names
}

/// The circles of `graph`: for each set of modules that all reach each other, one circle
/// through its first module, and the set.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut circles = Vec::new();
    let mut placed = BTreeSet::new();
    for start in graph.keys() {
        if placed.contains(start) {
            continue;
        }
        let tangled: BTreeSet<&String> = graph
            .keys()
            .filter(|other| reaches(graph, start, other) && reaches(graph, other, start))
            .collect();
        placed.extend(tangled.iter().map(|m| (*m).clone()));
        if tangled.len() > 1 {
            let members: Vec<&str> = tangled.iter().map(|m| m.as_str()).collect();
            circles.push(format!(
                "{} (tangled together: {})",
                shortest_way_back(graph, start).join(" → "),
                members.join(", ")
            ));
        }
    }
    circles
}

/// Whether `to` can be reached from `from` through one import or more.
fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut next: Vec<&str> = vec![from];
    while let Some(at) = next.pop() {
        for named in graph.get(at).into_iter().flatten() {
            if named == to {
                return true;
            }
            if seen.insert(named.as_str()) {
                next.push(named);
            }
        }
    }
    false
}

/// The shortest chain of imports from `start` back to itself (breadth first).
fn shortest_way_back(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Vec<String> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        for named in graph.get(at).into_iter().flatten() {
            if named == start {
                let mut way = vec![start.to_owned()];
                let mut back = at;
                while back != start {
                    way.push(back.to_owned());
                    back = came_from[back];
                }
                way.push(start.to_owned());
                way.reverse();
                return way;
            }
            if !came_from.contains_key(named.as_str()) {
                came_from.insert(named, at);
                queue.push_back(named);
            }
        }
    }
    vec![start.to_owned()]
}
