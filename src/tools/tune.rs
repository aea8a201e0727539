//! `loopguard tune`: the detectors under several settings over the same
//! sessions, side by side.
//!
//! Inputs: recordings (`[recording]`) and `.jsonl` files of successive
//! request bodies (`--interval` apart), each file one session, each parsed
//! once; every setting then judges the parsed requests (and recorded
//! responses, as they streamed) — no file is read or parsed twice. Settings:
//! each combination of the `--set DETECTOR.KEY=V1,V2,…` lists applied to the
//! base config, or each `--config FILE`. Per setting: sessions warned,
//! stopped (a critical verdict), broken (a breaker verdict), the median
//! request index of the first warning and the first critical, and the
//! sessions whose outcome (the highest level reached and where) differs
//! from the base's. With `--labels FILE` (session file → `loop` /
//! `progress`), also recall (labelled loops warned / stopped) and false
//! positives (labelled progress runs warned / stopped).
//!
//! Labels file: lines `FILE LABEL` (whitespace-separated, `#` comments), a
//! JSON object `{"FILE": "LABEL"}`, or a Markdown table whose first column
//! is the file and last column the label (the trajectories' `INDEX.md`).
//! Files match by name; labels other than `loop` / `progress` (`mixed`)
//! are not counted.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::recorded::{self, Parsed, ParsedStep};
use crate::detect::{Level, ReplayLine, Settings};

/// One session as parsed once.
#[derive(Debug)]
pub struct Session {
    /// The file's name.
    pub name: String,
    /// Its steps.
    pub parsed: Parsed,
}

/// Reads each file once into a session.
///
/// # Errors
/// The file and what went wrong.
pub fn load(files: &[PathBuf], interval: Duration) -> Result<Vec<Session>, String> {
    files
        .iter()
        .map(|path| {
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let parsed = if super::replay::is_recording_file(path) {
                recorded::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?
            } else {
                bodies(&text, interval).map_err(|e| format!("{}: {e}", path.display()))?
            };
            Ok(Session { name, parsed })
        })
        .collect()
}

/// Successive request bodies, one a line, `interval` apart.
fn bodies(text: &str, interval: Duration) -> Result<Parsed, String> {
    let mut dialect = None;
    let mut steps = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        let d = dialect
            .or_else(|| crate::dialect::Dialect::guess(&value))
            .ok_or_else(|| format!("line {}: cannot tell the dialect", n + 1))?;
        dialect = Some(d);
        let parsed = d.parse_request(line.as_bytes()).ok().map(Box::new);
        steps.push(ParsedStep::Request {
            t: interval * u32::try_from(steps.len()).unwrap_or(u32::MAX),
            parsed,
            summarizer: false,
        });
    }
    Ok(Parsed {
        dialect: dialect.ok_or("no request bodies")?,
        steps,
    })
}

/// What one session came to under one setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// The highest level reached (`None`: no verdict above observe).
    pub level: Option<Level>,
    /// The request of the first warning-level verdict (or higher).
    pub first_warning: Option<usize>,
    /// The request of the first critical-level verdict (or higher).
    pub first_critical: Option<usize>,
    /// A breaker verdict came.
    pub broken: bool,
}

impl Outcome {
    fn of(lines: &[ReplayLine]) -> Self {
        let first = |min: Level| lines.iter().filter(|l| l.level >= min).map(|l| l.request).min();
        Self {
            level: lines
                .iter()
                .map(|l| l.level)
                .filter(|l| *l >= Level::Warning)
                .max(),
            first_warning: first(Level::Warning),
            first_critical: first(Level::Critical),
            broken: lines.iter().any(|l| l.level == Level::Breaker),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The setting (`base`, `identical_call.critical=4 cycle.warning=2`, or a file).
    pub setting: String,
    /// Sessions with a warning (or higher).
    pub warned: usize,
    /// Sessions with a critical verdict (stopped).
    pub stopped: usize,
    /// Sessions with a breaker verdict.
    pub broken: usize,
    /// Median request index of the first warning over warned sessions.
    pub median_first_warning: Option<f64>,
    /// Median request index of the first critical over stopped sessions.
    pub median_first_critical: Option<f64>,
    /// Sessions whose outcome differs from the base's.
    pub changed: Vec<String>,
    /// With labels: labelled loops warned / stopped, and how many loops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recall: Option<Recall>,
    /// Per session, its outcome.
    pub sessions: BTreeMap<String, Outcome>,
}

/// Recall and false positives against labels.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Recall {
    /// Sessions labelled `loop`.
    pub loops: usize,
    /// Of them, warned (or higher).
    pub loops_warned: usize,
    /// Of them, stopped.
    pub loops_stopped: usize,
    /// Sessions labelled `progress`.
    pub progress: usize,
    /// Of them, warned (false positives).
    pub progress_warned: usize,
    /// Of them, stopped (false positives).
    pub progress_stopped: usize,
}

/// Labels: file name → `loop` / `progress` (others dropped).
///
/// # Errors
/// The file could not be read, or is JSON that is not a map of strings.
pub fn labels(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    if text.trim_start().starts_with('{') {
        let map: BTreeMap<String, String> =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        out = map;
    } else {
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (file, label) = if line.starts_with('|') {
                let cells: Vec<&str> = line.split('|').map(str::trim).filter(|c| !c.is_empty()).collect();
                match (cells.first(), cells.last()) {
                    (Some(f), Some(l)) if cells.len() >= 2 => (*f, *l),
                    _ => continue,
                }
            } else {
                let mut parts = line.split_whitespace();
                match (parts.next(), parts.next()) {
                    (Some(f), Some(l)) => (f, l),
                    _ => continue,
                }
            };
            out.insert(file.to_owned(), label.to_owned());
        }
    }
    out.retain(|_, label| label == "loop" || label == "progress");
    Ok(out)
}

/// Judges every session under `settings`.
pub fn outcomes(sessions: &[Session], settings: &Settings) -> BTreeMap<String, Outcome> {
    sessions
        .iter()
        .map(|s| (s.name.clone(), Outcome::of(&recorded::judge(&s.parsed, settings))))
        .collect()
}

fn median(mut values: Vec<usize>) -> Option<f64> {
    values.sort_unstable();
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2] as f64),
        _ => Some((values[n / 2 - 1] + values[n / 2]) as f64 / 2.0),
    }
}

/// The row of one setting, compared with the base's outcomes.
pub fn row(
    setting: String,
    sessions: BTreeMap<String, Outcome>,
    base: &BTreeMap<String, Outcome>,
    labels: Option<&BTreeMap<String, String>>,
) -> Row {
    let all = || sessions.values();
    let warned = all().filter(|o| o.first_warning.is_some()).count();
    let stopped = all().filter(|o| o.first_critical.is_some()).count();
    let broken = all().filter(|o| o.broken).count();
    let changed = sessions
        .iter()
        .filter(|(name, o)| base.get(*name) != Some(o))
        .map(|(name, _)| name.clone())
        .collect();
    let recall = labels.map(|labels| {
        let with = |label: &str| {
            sessions
                .iter()
                .filter(|(name, _)| labels.get(*name).is_some_and(|l| l == label))
                .map(|(_, o)| *o)
                .collect::<Vec<_>>()
        };
        let (loops, progress) = (with("loop"), with("progress"));
        Recall {
            loops: loops.len(),
            loops_warned: loops.iter().filter(|o| o.first_warning.is_some()).count(),
            loops_stopped: loops.iter().filter(|o| o.first_critical.is_some()).count(),
            progress: progress.len(),
            progress_warned: progress.iter().filter(|o| o.first_warning.is_some()).count(),
            progress_stopped: progress.iter().filter(|o| o.first_critical.is_some()).count(),
        }
    });
    Row {
        setting,
        warned,
        stopped,
        broken,
        median_first_warning: median(all().filter_map(|o| o.first_warning).collect()),
        median_first_critical: median(all().filter_map(|o| o.first_critical).collect()),
        changed,
        recall,
        sessions,
    }
}

/// Parses `--set DETECTOR.KEY=V1,V2`: the key path under `loop_detection`
/// and its values (TOML values: numbers, booleans, strings).
///
/// # Errors
/// The text has no `=` or a value that is not TOML.
pub fn parse_set(text: &str) -> Result<(String, Vec<toml::Value>), String> {
    let (key, values) = text
        .split_once('=')
        .ok_or_else(|| format!("--set {text}: expected DETECTOR.KEY=V1,V2,…"))?;
    let values = values
        .split(',')
        .map(|v| {
            let v = v.trim();
            toml::from_str::<toml::Table>(&format!("v = {v}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(v.to_owned()))
        })
        .collect();
    Ok((key.trim().to_owned(), values))
}

/// Every combination of the `--set` lists, each as `(label, [(key, value)])`.
pub fn combinations(sets: &[(String, Vec<toml::Value>)]) -> Vec<(String, Vec<(String, toml::Value)>)> {
    let mut out: Vec<Vec<(String, toml::Value)>> = vec![Vec::new()];
    for (key, values) in sets {
        out = out
            .into_iter()
            .flat_map(|done| {
                values.iter().map(move |v| {
                    let mut next = done.clone();
                    next.push((key.clone(), v.clone()));
                    next
                })
            })
            .collect();
    }
    out.into_iter()
        .map(|pairs| {
            let label = pairs
                .iter()
                .map(|(k, v)| format!("{k}={}", shown(v)))
                .collect::<Vec<_>>()
                .join(" ");
            (label, pairs)
        })
        .collect()
}

/// A `--set` value as given.
fn shown(value: &toml::Value) -> String {
    match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

/// The base table with `loop_detection.KEY = value` set for each pair.
///
/// # Errors
/// A key path runs through a value that is not a table.
pub fn apply(base: &toml::Table, pairs: &[(String, toml::Value)]) -> Result<toml::Table, String> {
    let mut table = base.clone();
    for (key, value) in pairs {
        let path: Vec<&str> = std::iter::once("loop_detection").chain(key.split('.')).collect();
        let mut at = &mut table;
        for part in &path[..path.len() - 1] {
            let entry = at
                .entry((*part).to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            at = entry
                .as_table_mut()
                .ok_or_else(|| format!("--set {key}: {part} is not a table"))?;
        }
        if let Some(last) = path.last() {
            at.insert((*last).to_owned(), value.clone());
        }
    }
    Ok(table)
}

fn cell(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v}"))
}

/// The human table.
pub fn table(rows: &[Row], sessions: usize) -> String {
    let mut out = String::new();
    let width = rows.iter().map(|r| r.setting.len()).max().unwrap_or(7).max(7);
    let labelled = rows.iter().any(|r| r.recall.is_some());
    let _ = write!(
        out,
        "{:width$}  {:>6}  {:>7}  {:>6}  {:>8}  {:>8}  {:>7}",
        "setting", "warned", "stopped", "broken", "1st warn", "1st crit", "changed"
    );
    if labelled {
        let _ = write!(out, "  {:>12}  {:>12}", "loops w/s", "progress w/s");
    }
    let _ = writeln!(out, "   ({sessions} sessions; 1st = median request index)");
    for r in rows {
        let _ = write!(
            out,
            "{:width$}  {:>6}  {:>7}  {:>6}  {:>8}  {:>8}  {:>7}",
            r.setting,
            r.warned,
            r.stopped,
            r.broken,
            cell(r.median_first_warning),
            cell(r.median_first_critical),
            r.changed.len()
        );
        if let Some(c) = r.recall {
            let loops = format!("{}/{} of {}", c.loops_warned, c.loops_stopped, c.loops);
            let progress = format!("{}/{} of {}", c.progress_warned, c.progress_stopped, c.progress);
            let _ = write!(out, "  {loops:>12}  {progress:>12}");
        }
        out.push('\n');
    }
    out
}

/// What `tune` was asked to do.
#[derive(Debug)]
pub struct Request<'a> {
    /// The base config's text and name.
    pub base: (String, String),
    /// `--set` lists.
    pub sets: &'a [String],
    /// `--config` files (whole settings).
    pub configs: &'a [PathBuf],
    /// The sessions.
    pub files: &'a [PathBuf],
    /// Time between bodies of a `.jsonl` file.
    pub interval: Duration,
    /// `--labels`.
    pub labels: Option<&'a Path>,
}

/// Runs tune: the base row first, then one row per setting.
///
/// # Errors
/// A file, a setting or a config that could not be used, with why.
pub fn run(request: &Request<'_>) -> Result<(Vec<Row>, usize), String> {
    let (base_text, base_name) = &request.base;
    let base_table: toml::Table = toml::from_str(base_text).map_err(|e| format!("{base_name}: {e}"))?;
    let settings_of = |table: toml::Table, name: &str| -> Result<Settings, String> {
        crate::config::load_table(table, name)
            .map(|l| (*l.config.loop_detection.defaults).clone())
            .map_err(|e| e.to_string())
    };
    let base = settings_of(base_table.clone(), base_name)?;
    let mut settings: Vec<(String, Settings)> = Vec::new();
    let sets = request
        .sets
        .iter()
        .map(|s| parse_set(s))
        .collect::<Result<Vec<_>, _>>()?;
    if !sets.is_empty() {
        for (label, pairs) in combinations(&sets) {
            let table = apply(&base_table, &pairs)?;
            settings.push((label.clone(), settings_of(table, &label)?));
        }
    }
    for path in request.configs {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let name = path.display().to_string();
        let table: toml::Table = toml::from_str(&text).map_err(|e| format!("{name}: {e}"))?;
        settings.push((name.clone(), settings_of(table, &name)?));
    }
    let sessions = load(request.files, request.interval)?;
    let labels = request.labels.map(labels).transpose()?;
    let base_outcomes = outcomes(&sessions, &base);
    let mut rows = vec![row(
        "base".to_owned(),
        base_outcomes.clone(),
        &base_outcomes,
        labels.as_ref(),
    )];
    for (label, s) in &settings {
        rows.push(row(
            label.clone(),
            outcomes(&sessions, s),
            &base_outcomes,
            labels.as_ref(),
        ));
    }
    Ok((rows, sessions.len()))
}
