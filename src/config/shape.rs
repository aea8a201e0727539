//! Shape problems (unknown keys, wrong types), all at once: serde stops at
//! the first, so the file is deserialized again and again, each time without
//! the key that failed, until the rest deserializes. Each problem carries its
//! key path, its line and column in the file, and for a misspelt key the
//! closest known name. The rest, once it deserializes, is validated as usual,
//! so shape and value problems are listed together.

use serde_path_to_error::Segment;
use toml::de::{DeTable, DeValue};

use super::problems::Problem;
use super::raw::RawConfig;

/// Shape problems listed at most.
const MAX_PROBLEMS: usize = 64;

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Name(String),
    Index(usize),
}

/// The file's shape problems and the raw form of what remains once the
/// failing keys are taken out; `None` when taking them out did not help
/// (then only the shape problems are known). `table` is the parsed file.
pub(super) fn problems(text: &str, mut table: toml::Table) -> (Vec<Problem>, Option<RawConfig>) {
    let spans = DeTable::parse(text).ok();
    let mut problems = Vec::new();
    while problems.len() < MAX_PROBLEMS {
        let error = match serde_path_to_error::deserialize::<_, RawConfig>(toml::Value::Table(table.clone()))
        {
            Ok(raw) => return (problems, Some(raw)),
            Err(e) => e,
        };
        let (keys, message) = described(&error);
        let (mut keys, mut message) = if message.starts_with("missing field") {
            (keys, message)
        } else {
            refine(&table, keys, message)
        };
        if message.starts_with("unknown field") {
            let named: Vec<String> = backticked(&message).into_iter().map(str::to_owned).collect();
            if let Some((unknown, known)) = named.split_first() {
                if keys.last() != Some(&Key::Name(unknown.clone())) {
                    keys.push(Key::Name(unknown.clone()));
                }
                let mut known: Vec<&str> = known.iter().map(String::as_str).collect();
                if known.is_empty()
                    && matches!(keys.iter().rev().nth(1), Some(Key::Name(n)) if n == "loop_detection")
                {
                    // serde names no alternatives inside a flattened table.
                    known = loop_detection_keys();
                }
                message = match closest(unknown, &known) {
                    Some(suggestion) => format!("unknown key `{unknown}`; did you mean `{suggestion}`?"),
                    None if known.is_empty() => format!("unknown key `{unknown}`"),
                    None => format!("unknown key `{unknown}` (known here: {})", known.join(", ")),
                };
            }
        }
        if let Some(at) = spans.as_ref().and_then(|s| locate(s.get_ref(), &keys)) {
            let (line, column) = line_column(text, at);
            message.push_str(&format!(" (line {line}, column {column})"));
        }
        problems.push(Problem {
            path: render(&keys),
            message,
        });
        if keys.is_empty() || !remove(&mut table, &keys) {
            return (problems, None);
        }
    }
    (problems, None)
}

type Failure = serde_path_to_error::Error<toml::de::Error>;

/// The key path and the first line of the message of a failure.
fn described(error: &Failure) -> (Vec<Key>, String) {
    let text = error.inner().to_string();
    let message = text.lines().next().unwrap_or_default().trim_end().to_owned();
    let keys = error
        .path()
        .iter()
        .filter_map(|s| match s {
            Segment::Seq { index } => Some(Key::Index(*index)),
            Segment::Map { key } => Some(Key::Name(key.clone())),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect();
    (keys, message)
}

fn check(table: &toml::Table) -> Result<(), Failure> {
    serde_path_to_error::deserialize::<_, RawConfig>(toml::Value::Table(table.clone())).map(|_| ())
}

/// Narrows a failure inside a table whose path serde lost (flattened tables
/// such as the detectors of `[loop_detection]` report only their parent):
/// the table is tried with one of its keys at a time, and the key that
/// alone still fails is where the problem is, recursively. When the table
/// emptied still fails the same way, the problem is not inside it.
fn refine(table: &toml::Table, keys: Vec<Key>, message: String) -> (Vec<Key>, String) {
    let Some(toml::Value::Table(node)) = get(table, &keys) else {
        return (keys, message);
    };
    let with = |only: toml::Table| {
        let mut doc = table.clone();
        if let Some(slot) = get_mut(&mut doc, &keys) {
            *slot = toml::Value::Table(only);
        }
        check(&doc).err().map(|e| described(&e))
    };
    if with(toml::Table::new()).is_some_and(|(_, m)| m == message) {
        return (keys, message);
    }
    for (k, v) in node {
        let Some((path, inner)) = with(toml::Table::from_iter([(k.clone(), v.clone())])) else {
            continue;
        };
        if inner != message {
            continue;
        }
        let mut deeper = keys.clone();
        deeper.push(Key::Name(k.clone()));
        if path.len() > deeper.len() && path.starts_with(&deeper) {
            return (path, inner);
        }
        if keys.starts_with(&path) {
            return refine(table, deeper, inner);
        }
    }
    (keys, message)
}

fn get<'a>(table: &'a toml::Table, keys: &[Key]) -> Option<&'a toml::Value> {
    let (Key::Name(first), rest) = keys.split_first()? else {
        return None;
    };
    let mut node = table.get(first)?;
    for k in rest {
        node = match (k, node) {
            (Key::Name(n), toml::Value::Table(t)) => t.get(n)?,
            (Key::Index(i), toml::Value::Array(a)) => a.get(*i)?,
            _ => return None,
        };
    }
    Some(node)
}

fn get_mut<'a>(table: &'a mut toml::Table, keys: &[Key]) -> Option<&'a mut toml::Value> {
    let (Key::Name(first), rest) = keys.split_first()? else {
        return None;
    };
    let mut node = table.get_mut(first)?;
    for k in rest {
        node = match (k, node) {
            (Key::Name(n), toml::Value::Table(t)) => t.get_mut(n)?,
            (Key::Index(i), toml::Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(node)
}

/// The keys `[loop_detection]` (and an agent's `loop_detection`) accepts:
/// the fields of `RawLoopDetection` and one table per detector.
fn loop_detection_keys() -> Vec<&'static str> {
    let mut keys = vec![
        "enabled",
        "history_size",
        "volatile_keys",
        "outcome_masks",
        "dedup_notices",
        "error_patterns",
        "poll_tools",
        "exempt_tools",
        "canned_patterns",
        "actions",
        "compaction",
        "semantic_check",
    ];
    keys.extend(
        crate::detect::DetectorKind::ALL
            .iter()
            .filter(|d| **d != crate::detect::DetectorKind::SemanticLoop)
            .map(|d| d.name()),
    );
    keys
}

/// `a.b[2].c`.
fn render(keys: &[Key]) -> String {
    let mut out = String::new();
    for k in keys {
        match k {
            Key::Name(n) if out.is_empty() => out.push_str(n),
            Key::Name(n) => {
                out.push('.');
                out.push_str(n);
            }
            Key::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The words in backticks, in order (serde names the unknown key first, then the expected ones).
fn backticked(message: &str) -> Vec<&str> {
    message.split('`').skip(1).step_by(2).collect()
}

/// The known name closest to a misspelt one (fewest edits), when it is
/// close enough to be what was meant: at most a third of its letters differ
/// (one always may), or one is the start of the other (`warn` for
/// `warning`). A closer name wins over a start (`max_request_bytes_inflight`
/// is `max_request_bytes_in_flight`, not `max_request_bytes`).
fn closest<'a>(unknown: &str, known: &[&'a str]) -> Option<&'a str> {
    let limit = (unknown.chars().count() / 3).max(1);
    let prefix =
        |k: &str| unknown.len() >= 3 && k.len() >= 3 && (k.starts_with(unknown) || unknown.starts_with(k));
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(unknown, k), *k))
        .filter(|(d, k)| *d <= limit || prefix(k))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Byte offset of the key at `keys` (of the element, for an index).
fn locate(table: &DeTable<'_>, keys: &[Key]) -> Option<usize> {
    let (Key::Name(first), rest) = keys.split_first()? else {
        return None;
    };
    let (key, value) = table
        .iter()
        .find(|(k, _)| k.get_ref().as_ref() == first.as_str())?;
    let mut at = key.span().start;
    let mut value = value;
    for k in rest {
        match (k, value.get_ref()) {
            (Key::Name(n), DeValue::Table(t)) => {
                let (key, v) = t.iter().find(|(key, _)| key.get_ref().as_ref() == n.as_str())?;
                at = key.span().start;
                value = v;
            }
            (Key::Index(i), DeValue::Array(a)) => {
                value = a.get(*i)?;
                at = value.span().start;
            }
            _ => return None,
        }
    }
    Some(at)
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Removes the key at `keys`; false when there is nothing there to remove,
/// or the key is an array element (removing it would renumber the rest).
fn remove(table: &mut toml::Table, keys: &[Key]) -> bool {
    let Some((Key::Name(last), parents)) = keys.split_last() else {
        return false;
    };
    if parents.is_empty() {
        return table.remove(last).is_some();
    }
    match get_mut(table, parents) {
        Some(toml::Value::Table(t)) => t.remove(last).is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_key_gets_the_closest_known_name_and_a_foreign_one_none() {
        assert_eq!(
            closest("idntical_call", &["cycle", "identical_call"]),
            Some("identical_call")
        );
        assert_eq!(closest("warn", &["warning", "critical"]), Some("warning"));
        assert_eq!(
            closest("listen_addr", &["listen", "admin_listen"]),
            Some("listen")
        );
        assert_eq!(closest("bogus", &["cycle", "identical_call"]), None);
        assert_eq!(closest("upstrem", &["upstream", "prefix"]), Some("upstream"));
        assert_eq!(
            closest(
                "max_request_bytes_inflight",
                &["max_request_bytes", "max_request_bytes_in_flight"]
            ),
            Some("max_request_bytes_in_flight")
        );
    }

    #[test]
    fn every_listed_loop_detection_key_is_known() {
        for key in loop_detection_keys() {
            let text = format!("[loop_detection]\n{key} = 0\n");
            let table: toml::Table = toml::from_str(&text).unwrap_or_default();
            let (found, _) = problems(&text, table);
            assert!(
                found.iter().all(|p| !p.message.contains("unknown key")),
                "{key}: {found:?}"
            );
        }
    }

    #[test]
    fn offsets_become_lines_and_columns() {
        assert_eq!(line_column("a = 1\nbc = 2\n", 6), (2, 1));
        assert_eq!(line_column("a = 1\nbc = 2\n", 8), (2, 3));
    }
}
