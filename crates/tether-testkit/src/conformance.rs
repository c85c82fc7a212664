//! Helpers the conformance-suite tests share: reading the expected-failures files and tidying
//! the suite's printed output. The suite runs themselves, and what counts as a failure, stay in
//! each test (`conformance_server`, `conformance_client`), since the server and client suites
//! report differently.

use anyhow::{Context as _, ensure};

use crate::peers;

/// One line of an expected-failures file: a scenario or check that may fail, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Expected {
    /// The scenario or check id.
    pub name: String,
    /// Why it is excused.
    pub reason: String,
}

/// Reads and validates the expected-failures file at `relative` (to the workspace root).
///
/// # Errors
///
/// When the file cannot be read or [`parse_expected`] refuses it.
pub fn read_expected(
    relative: &str,
    never: impl Fn(&str) -> bool,
) -> anyhow::Result<Vec<Expected>> {
    let path = peers::workspace_dir().join(relative);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    parse_expected(&text, never).with_context(|| format!("in {}", path.display()))
}

/// Parses an expected-failures file: one `name  # reason` a line, `#` lines and blank lines
/// skipped.
///
/// # Errors
///
/// When an entry is not one word, has no reason, or is a name for which `never` holds: a
/// scenario that may never fail must not be excused by editing a text file.
pub fn parse_expected(text: &str, never: impl Fn(&str) -> bool) -> anyhow::Result<Vec<Expected>> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, reason) = line
            .split_once('#')
            .with_context(|| format!("line {number}: {line:?} has no `# reason`"))?;
        let (name, reason) = (name.trim(), reason.trim());
        ensure!(
            !name.is_empty() && !name.contains(char::is_whitespace),
            "line {number}: expected one scenario or check id, got {name:?}"
        );
        ensure!(!reason.is_empty(), "line {number}: {name} has no reason");
        ensure!(
            !never(name),
            "line {number}: {name} may never be an expected failure"
        );
        entries.push(Expected {
            name: name.to_owned(),
            reason: reason.to_owned(),
        });
    }
    Ok(entries)
}

/// Drops ANSI colour sequences (`ESC [ … m`).
#[must_use]
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The last `lines` lines of `text`.
#[must_use]
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_expected_needs_a_reason_and_refuses_never_names() {
        let never = |name: &str| name == "sse-retry";
        let entries = parse_expected("# comment\n\ninitialize  # mock is wrong\n", never).unwrap();
        assert_eq!(
            entries,
            [Expected {
                name: "initialize".to_owned(),
                reason: "mock is wrong".to_owned()
            }]
        );
        assert!(parse_expected("initialize\n", never).is_err());
        assert!(parse_expected("initialize #  \n", never).is_err());
        assert!(parse_expected("two words # no\n", never).is_err());
        assert!(parse_expected("sse-retry # no\n", never).is_err());
    }

    #[test]
    fn strip_ansi_and_tail() {
        assert_eq!(strip_ansi("\u{1b}[32mPASS\u{1b}[0m ok"), "PASS ok");
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
