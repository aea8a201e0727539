//! `loopguard replay --summary`: one row per replayed file (verdicts per
//! level, the first warning / critical / breaker and the first stop with its
//! request index and detector) and the totals over files, as a table for
//! people or JSON for scripts. [`FileSummary::of`] is the unit a threshold
//! tuner compares between settings.

use std::fmt::Write as _;

use serde::Serialize;

use crate::detect::{Action, DetectorKind, Level, ReplayLine};
use crate::tools::replay::Replayed;

/// Where a level (or a stop) was first reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct First {
    /// 0-based request index.
    pub request: usize,
    /// The detector that reached it.
    pub detector: DetectorKind,
}

/// One file's replay, summarised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileSummary {
    /// The file as given.
    pub file: String,
    /// Request bodies replayed.
    pub requests: usize,
    /// Verdicts at level warning.
    pub warning: usize,
    /// Verdicts at level critical.
    pub critical: usize,
    /// Verdicts at level breaker.
    pub breaker: usize,
    /// The first warning-level verdict.
    pub first_warning: Option<First>,
    /// The first critical-level verdict.
    pub first_critical: Option<First>,
    /// The first breaker-level verdict.
    pub first_breaker: Option<First>,
    /// The first verdict whose action stops the call (block or abort).
    pub first_stop: Option<First>,
}

impl FileSummary {
    /// Summarises one file's replay.
    pub fn of(file: &str, replayed: &Replayed) -> Self {
        let lines = &replayed.lines;
        let count = |level| lines.iter().filter(|l| l.level == level).count();
        let first = |keep: &dyn Fn(&ReplayLine) -> bool| {
            lines
                .iter()
                .filter(|l| keep(l))
                .min_by_key(|l| l.request)
                .map(|l| First {
                    request: l.request,
                    detector: l.detector,
                })
        };
        Self {
            file: file.to_owned(),
            requests: replayed.requests,
            warning: count(Level::Warning),
            critical: count(Level::Critical),
            breaker: count(Level::Breaker),
            first_warning: first(&|l| l.level == Level::Warning),
            first_critical: first(&|l| l.level == Level::Critical),
            first_breaker: first(&|l| l.level == Level::Breaker),
            first_stop: first(&|l| matches!(l.action, Action::Block | Action::Abort)),
        }
    }
}

/// The totals over files.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Totals {
    /// Files summarised.
    pub files: usize,
    /// Requests over all files.
    pub requests: usize,
    /// Verdicts at each level over all files.
    pub warning: usize,
    /// See `warning`.
    pub critical: usize,
    /// See `warning`.
    pub breaker: usize,
    /// Files with at least one warning-level verdict.
    pub files_warned: usize,
    /// Files with at least one critical-level verdict.
    pub files_critical: usize,
    /// Files where a call was stopped (block or abort).
    pub files_stopped: usize,
}

impl Totals {
    /// Adds the files up.
    pub fn of(files: &[FileSummary]) -> Self {
        let mut t = Self {
            files: files.len(),
            ..Self::default()
        };
        for f in files {
            t.requests += f.requests;
            t.warning += f.warning;
            t.critical += f.critical;
            t.breaker += f.breaker;
            t.files_warned += usize::from(f.first_warning.is_some());
            t.files_critical += usize::from(f.first_critical.is_some());
            t.files_stopped += usize::from(f.first_stop.is_some());
        }
        t
    }
}

fn cell(first: Option<&First>) -> String {
    first.map_or_else(
        || "-".to_owned(),
        |f| format!("#{} {}", f.request, f.detector.name()),
    )
}

/// Ends the last row without its padding.
fn trim_line(out: &mut String) {
    out.truncate(out.trim_end().len());
    out.push('\n');
}

/// The human table: one row per file, then the totals.
pub fn table(files: &[FileSummary]) -> String {
    let totals = Totals::of(files);
    let name_width = files.iter().map(|f| f.file.len()).max().unwrap_or(4).max(5);
    let mut out = String::new();
    let _ = write!(
        out,
        "{:<name_width$}  {:>8}  {:>7}  {:>8}  {:>7}  {:<26}  {:<26}  {:<26}",
        "file", "requests", "warning", "critical", "breaker", "first warning", "first critical", "first stop"
    );
    trim_line(&mut out);
    for f in files {
        let _ = write!(
            out,
            "{:<name_width$}  {:>8}  {:>7}  {:>8}  {:>7}  {:<26}  {:<26}  {:<26}",
            f.file,
            f.requests,
            f.warning,
            f.critical,
            f.breaker,
            cell(f.first_warning.as_ref()),
            cell(f.first_critical.as_ref()),
            cell(f.first_stop.as_ref()),
        );
        trim_line(&mut out);
    }
    let _ = writeln!(
        out,
        "{:<name_width$}  {:>8}  {:>7}  {:>8}  {:>7}  {} of {} files warned, {} critical, {} stopped",
        "total",
        totals.requests,
        totals.warning,
        totals.critical,
        totals.breaker,
        totals.files_warned,
        totals.files,
        totals.files_critical,
        totals.files_stopped,
    );
    out
}

/// The JSON form: `{"files": [FileSummary…], "totals": Totals}`.
pub fn json(files: &[FileSummary]) -> serde_json::Value {
    serde_json::json!({"files": files, "totals": Totals::of(files)})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(request: usize, detector: DetectorKind, level: Level, action: Action) -> ReplayLine {
        ReplayLine {
            request,
            detector,
            level,
            action,
            count: 3,
            message: String::new(),
            at: None,
        }
    }

    #[test]
    fn a_file_summary_names_the_first_request_of_each_level_and_the_first_stop() {
        let replayed = Replayed {
            requests: 9,
            lines: vec![
                line(2, DetectorKind::IdenticalCall, Level::Warning, Action::Warn),
                line(3, DetectorKind::IdenticalCall, Level::Warning, Action::Warn),
                line(4, DetectorKind::IdenticalCall, Level::Critical, Action::Block),
            ],
        };
        let s = FileSummary::of("a.jsonl", &replayed);
        assert_eq!((s.requests, s.warning, s.critical, s.breaker), (9, 2, 1, 0));
        assert_eq!(s.first_warning.map(|f| f.request), Some(2));
        assert_eq!(s.first_critical.map(|f| f.request), Some(4));
        assert_eq!(s.first_stop.map(|f| f.request), Some(4));
        assert!(s.first_breaker.is_none());
        let quiet = FileSummary::of(
            "b.jsonl",
            &Replayed {
                requests: 5,
                lines: vec![],
            },
        );
        let totals = Totals::of(&[s, quiet]);
        assert_eq!(
            (
                totals.files,
                totals.requests,
                totals.files_warned,
                totals.files_stopped
            ),
            (2, 14, 1, 1)
        );
    }
}
