//! What validation found: each [`Problem`] with its key path, the
//! [`Problems`] of one load (errors and notices), and the [`ConfigError`]
//! a rejected configuration becomes.

use std::fmt;

/// One configuration problem: the key path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Key path, e.g. `routes[1].upstream`; empty for syntax errors.
    pub path: String,
    /// What is wrong, naming the bad value.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found while validating, plus notices about values that were
/// adjusted (a raised threshold) rather than rejected.
#[derive(Debug, Clone, Default)]
pub struct Problems {
    /// Errors: the config is rejected when there is at least one.
    pub errors: Vec<Problem>,
    /// Adjustments made on load, to be logged.
    pub notices: Vec<Problem>,
}

impl Problems {
    /// Records an error at `path`.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Records a notice at `path`.
    pub fn notice(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.notices.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }
}

/// A configuration that could not be loaded: every problem found.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {} problem(s)\n{}", .errors.len(), render(.errors))]
pub struct ConfigError {
    /// The file name (or `<default>`).
    pub source_name: String,
    /// Every problem found.
    pub errors: Vec<Problem>,
}

fn render(errors: &[Problem]) -> String {
    errors
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}
