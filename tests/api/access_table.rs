//! The access table, `src/http/routes/access.txt`: one row per mounted operation saying which
//! class of answer each caller gets. Read here for both of its checks: `architecture::routes`
//! (the rows are exactly the mounted operations, without a server) and `authorization` (each
//! caller's answer is the class its cell names, on the fixture world).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

const TABLE: &str = include_str!("../../src/http/routes/access.txt");

/// The callers, in the table's column order.
pub const CALLERS: [&str; 7] = [
    "anonymous",
    "company",
    "expert",
    "admin",
    "owner",
    "participant",
    "applicant",
];

/// The classes a cell may name (`a|b` allows either).
const CLASSES: [&str; 5] = ["ok", "401", "403", "404", "skip"];

pub struct Row {
    pub method: String,
    pub path: String,
    /// One class per caller, in [`CALLERS`] order.
    pub cells: Vec<String>,
    /// The row's line in `access.txt`, for messages.
    pub line: usize,
}

/// Parses the table; a malformed line fails the test with its number.
pub fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    for (n, raw) in TABLE.lines().enumerate() {
        let text = raw.split('#').next().unwrap_or_default().trim();
        if text.is_empty() {
            continue;
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(
            words.len(),
            2 + CALLERS.len(),
            "access.txt line {}: method, path and {} cells expected: {raw}",
            n + 1,
            CALLERS.len()
        );
        for cell in &words[2..] {
            assert!(
                cell.split('|').all(|c| CLASSES.contains(&c)),
                "access.txt line {}: unknown class {cell}",
                n + 1
            );
            assert!(
                *cell == "skip" || !cell.contains("skip"),
                "access.txt line {}: skip stands alone",
                n + 1
            );
        }
        if words[2..].contains(&"skip") {
            assert!(
                raw.contains('#'),
                "access.txt line {}: a skipped cell needs a reason after #",
                n + 1
            );
        }
        rows.push(Row {
            method: words[0].to_owned(),
            path: words[1].to_owned(),
            cells: words[2..].iter().map(|c| (*c).to_owned()).collect(),
            line: n + 1,
        });
    }
    rows
}

/// Every operation of an OpenAPI document, as (METHOD, path).
pub fn operations(doc: &Value) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "put", "post", "delete", "patch"] {
            if item.get(method).is_some() {
                ops.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    ops
}

/// What keeps the rows from being exactly the mounted operations, one line each: a row twice,
/// a row naming no mounted operation, a mounted operation without a row.
pub fn coverage_problems(rows: &[Row], mounted: &BTreeSet<(String, String)>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = BTreeMap::new();
    for row in rows {
        let key = (row.method.clone(), row.path.clone());
        if let Some(first) = seen.insert(key.clone(), row.line) {
            problems.push(format!(
                "access.txt lines {first} and {}: {} {} twice",
                row.line, row.method, row.path
            ));
        }
        if !mounted.contains(&key) {
            problems.push(format!(
                "access.txt line {}: {} {} is not a mounted operation",
                row.line, row.method, row.path
            ));
        }
    }
    for (method, path) in mounted {
        if !seen.contains_key(&(method.clone(), path.clone())) {
            problems.push(format!(
                "{method} {path} has no row in src/http/routes/access.txt"
            ));
        }
    }
    problems
}
