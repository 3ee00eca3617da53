//! What may import what (ARCHITECTURE.md, "Layers and what may import what").

use super::sources;

/// `domain` holds pure types and rules: it names no other part of the service.
#[test]
fn domain_imports_nothing_of_the_service() {
    let mut offences = Vec::new();
    for file in sources("domain") {
        for (n, line) in file.text.lines().enumerate() {
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                if !rest.starts_with("domain") {
                    offences.push(format!("{}:{}: {}", file.path, n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "domain imports the service:\n{}",
        offences.join("\n")
    );
}
