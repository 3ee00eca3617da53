//! States are types (ARCHITECTURE.md, "A state column"): every state column is a
//! `state_enum!` in `domain`, code outside `domain` names its states through the enum, and the
//! SQL guards of `store` move only along the lifecycle the enum declares.

use std::collections::BTreeMap;

use marketplace::domain::delivery::DeliveryStatus;
use marketplace::domain::dispute::DisputeStatus;
use marketplace::domain::milestone::MilestoneStatus;
use marketplace::domain::payment::{PaymentStatus, PayoutStatus};
use marketplace::domain::project::{ApplicationStatus, ProjectStatus};
use marketplace::domain::state::Lifecycle;

use super::{Source, sources};

/// Where state texts may be written as text: `domain` declares them, and the processor's
/// development stand-in speaks the processor's wire vocabulary (which shares some words).
fn may_spell_states(path: &str) -> bool {
    path.starts_with("src/domain/") || path.starts_with("src/integrations/standins/")
}

/// A string literal of a source: its line, its text, and whether a `:` follows it (a JSON
/// object key, not a value).
struct Literal {
    line: usize,
    text: String,
    is_key: bool,
}

/// The string literals of `code` up to its test module (`#[cfg(test)]`, which by the
/// project's habit closes a file), comments skipped. A small lexer: enough of Rust's string,
/// raw string, character and comment syntax to never mistake one for another.
fn literals(code: &str) -> Vec<Literal> {
    let code = code.split("\n#[cfg(test)]").next().unwrap_or(code);
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && at(i + 1) == '/') {
                line += usize::from(chars[i] == '\n');
                i += 1;
            }
            i += 2;
        } else if c == '\'' {
            // A character literal ('x', '\n', '"'), or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c == 'r' && matches!(at(i + 1), '"' | '#') && !(i > 0 && is_ident(chars[i - 1])) {
            let mut hashes = 0;
            let mut j = i + 1;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            if at(j) != '"' {
                i += 1;
                continue;
            }
            let (start_line, start) = (line, j + 1);
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|h| at(j + 1 + h) == '#') {
                    break;
                }
                line += usize::from(chars[j] == '\n');
                j += 1;
            }
            let text: String = chars[start..j.min(chars.len())].iter().collect();
            i = j + 1 + hashes;
            out.push(literal(&chars, i, start_line, text));
        } else if c == '"' {
            let (start_line, mut j) = (line, i + 1);
            let mut text = String::new();
            while j < chars.len() && chars[j] != '"' {
                if chars[j] == '\\' {
                    text.push(chars[j]);
                    j += 1;
                }
                line += usize::from(chars[j] == '\n');
                text.push(chars[j]);
                j += 1;
            }
            i = j + 1;
            out.push(literal(&chars, i, start_line, text));
        } else {
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn literal(chars: &[char], after: usize, line: usize, text: String) -> Literal {
    let next = chars[after.min(chars.len())..]
        .iter()
        .find(|c| !c.is_whitespace());
    Literal {
        line,
        text,
        is_key: next == Some(&':') && chars.get(after + 1) != Some(&':'),
    }
}

/// The enums `state_enum!` declares in `domain`, each with its texts, read from the source.
fn declared_states() -> BTreeMap<String, Vec<String>> {
    let mut enums = BTreeMap::new();
    for file in sources("domain") {
        if file.path == "src/domain/state.rs" {
            continue; // the macro itself, and its own example
        }
        for block in file.text.split("state_enum! {").skip(1) {
            let body = block.split("\n}").next().unwrap_or_default();
            let name = body
                .split("pub enum ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                .unwrap_or_default()
                .to_owned();
            let texts = literals(body)
                .into_iter()
                .map(|l| l.text)
                .collect::<Vec<_>>();
            enums.insert(name, texts);
        }
    }
    enums
}

#[test]
fn the_state_enums_are_found() {
    let enums = declared_states();
    for name in [
        "ProjectStatus",
        "ApplicationStatus",
        "MilestoneStatus",
        "DeliveryStatus",
        "PaymentStatus",
        "PayoutStatus",
        "DisputeStatus",
        "ReviewVisibility",
        "WebhookDeliveryState",
        "SyncStatus",
        "VerificationStatus",
        "Dac7ReviewStatus",
    ] {
        assert!(
            enums.get(name).is_some_and(|texts| !texts.is_empty()),
            "{name} is not declared with state_enum! in domain: {enums:?}"
        );
    }
    assert_eq!(
        enums["PaymentStatus"],
        PaymentStatus::ALL.map(PaymentStatus::as_str),
        "the texts read from the source are the enum's"
    );
}

/// Outside `domain`, a state is named by its enum: a literal `"held"` compiles whatever its
/// spelling, `PaymentStatus::Held` does not. JSON object keys and attributes are not states.
#[test]
fn no_state_is_spelled_as_text_outside_domain() {
    let texts: BTreeMap<String, String> = declared_states()
        .into_iter()
        .flat_map(|(name, texts)| texts.into_iter().map(move |t| (t, name.clone())))
        .collect();
    let offences: Vec<String> = sources("")
        .iter()
        .filter(|file| !may_spell_states(&file.path))
        .flat_map(|file: &Source| {
            let lines: Vec<&str> = file.text.lines().collect();
            // An attribute's text (an OpenAPI example) documents; it decides nothing.
            let in_attribute = move |l: &Literal| lines[l.line - 1].trim_start().starts_with("#[");
            literals(&file.text)
                .into_iter()
                .filter(move |l| !l.is_key && !in_attribute(l))
                .filter_map(|l| {
                    texts
                        .get(&l.text)
                        .map(|name| format!("{}:{}: \"{}\" is {name}'s", file.path, l.line, l.text))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        offences.is_empty(),
        "state texts outside domain (name the enum's variant instead):\n{}",
        offences.join("\n")
    );
}

/// Every conditional update in `store` that writes a state and guards it by the states it
/// starts from (`SET status = 'b' … WHERE status = 'a'` or `IN (…)`) moves along its enum's
/// lifecycle. Moves with bound states are checked when they run (`store::transition_rows`).
#[test]
fn the_sql_guards_follow_the_lifecycles() {
    let mut checked = 0;
    let mut offences = Vec::new();
    for file in sources("store") {
        for l in literals(&file.text) {
            let sql = l.text.split_whitespace().collect::<Vec<_>>().join(" ");
            for (table, column, to, from) in guarded_moves(&sql) {
                let Some(allowed) = lifecycle(&table, &column) else {
                    continue;
                };
                for from in from {
                    checked += 1;
                    match allowed(&from, &to) {
                        Some(true) => {}
                        Some(false) => offences.push(format!(
                            "{}:{}: {table}.{column} '{from}' → '{to}' is not a move of its lifecycle",
                            file.path, l.line
                        )),
                        None => offences.push(format!(
                            "{}:{}: {table}.{column} names a state its enum lacks ('{from}' → '{to}')",
                            file.path, l.line
                        )),
                    }
                }
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} guarded moves found: is the parser still right?"
    );
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}

type MoveCheck = fn(&str, &str) -> Option<bool>;

/// The lifecycle of a state column: whether `from` may move to `to`, `None` for a text the
/// enum lacks.
fn lifecycle(table: &str, column: &str) -> Option<MoveCheck> {
    fn check<S: Lifecycle>(parse: fn(&str) -> Option<S>, from: &str, to: &str) -> Option<bool> {
        Some(parse(from)?.can_move_to(parse(to)?))
    }
    Some(match (table, column) {
        ("projects", "status") => |f, t| check(ProjectStatus::parse, f, t),
        ("applications", "status") => |f, t| check(ApplicationStatus::parse, f, t),
        ("milestones", "status") => |f, t| check(MilestoneStatus::parse, f, t),
        ("deliveries", "status") => |f, t| check(DeliveryStatus::parse, f, t),
        ("payments", "status") => |f, t| check(PaymentStatus::parse, f, t),
        ("payments", "payout_status") => |f, t| check(PayoutStatus::parse, f, t),
        ("disputes", "status") => |f, t| check(DisputeStatus::parse, f, t),
        _ => return None,
    })
}

/// `(table, column, to, froms)` of each `UPDATE table SET column = 'to' … WHERE … column =
/// 'from'` (or `column IN ('a', 'b')`) in one SQL text; a column written or guarded by a bound
/// value is left out.
fn guarded_moves(sql: &str) -> Vec<(String, String, String, Vec<String>)> {
    let mut out = Vec::new();
    let Some(rest) = sql.strip_prefix("UPDATE ") else {
        return out;
    };
    let table = rest
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let Some((set, guard)) = rest.split_once(" WHERE ") else {
        return out;
    };
    for column in ["status", "payout_status"] {
        let Some(to) = quoted_after(set, &format!(" {column} = ")) else {
            continue;
        };
        let mut from = Vec::new();
        for (i, _) in guard.match_indices(column) {
            let before = guard[..i].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // e.g. `payout_status` while looking for `status`
            }
            let after = &guard[i + column.len()..];
            if let Some(text) = after.strip_prefix(" = ").and_then(|a| quoted_after(a, "")) {
                from.push(text);
            } else if let Some(list) = after.strip_prefix(" IN (") {
                let list = list.split(')').next().unwrap_or_default();
                from.extend(
                    list.split(',')
                        .filter_map(|item| quoted_after(item.trim(), "")),
                );
            }
        }
        if !from.is_empty() {
            out.push((table.clone(), column.to_owned(), to, from));
        }
    }
    out
}

/// The single-quoted SQL text right after `prefix` in `text` (at its start for `""`).
fn quoted_after(text: &str, prefix: &str) -> Option<String> {
    let start = if prefix.is_empty() {
        0
    } else {
        text.find(prefix)? + prefix.len()
    };
    let rest = text[start..].strip_prefix('\'')?;
    Some(rest.split('\'').next()?.to_owned())
}

#[test]
fn the_lexer_reads_what_rust_writes() {
    let code = r####"
        let a = "held"; // "released" in a comment
        let b = r#"raw "quoted" text"#;
        let c = '"'; let d = "x\"y"; fn f<'a>(s: &'a str) {}
        json!({ "pending": 1 });
        /* "failed" */ let e = "done";
    "####;
    let found: Vec<(usize, String, bool)> = literals(code)
        .into_iter()
        .map(|l| (l.line, l.text, l.is_key))
        .collect();
    assert_eq!(
        found,
        [
            (2, "held".to_owned(), false),
            (3, "raw \"quoted\" text".to_owned(), false),
            (4, "x\\\"y".to_owned(), false),
            (5, "pending".to_owned(), true),
            (6, "done".to_owned(), false),
        ]
    );
    let moves = guarded_moves(
        "UPDATE payments SET status = 'held', payout_status = 'failed' WHERE id = $1 AND status IN ('pending', 'disputed') AND payout_status = 'pending'",
    );
    assert_eq!(
        moves,
        [
            (
                "payments".into(),
                "status".into(),
                "held".into(),
                vec!["pending".into(), "disputed".into()]
            ),
            (
                "payments".into(),
                "payout_status".into(),
                "failed".into(),
                vec!["pending".into()]
            ),
        ]
    );
}
