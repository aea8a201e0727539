//! The loop detectors: pure, synchronous judgement of transcripts and streams.
//!
//! Map of the module, in the order a request meets it:
//!
//! - [`settings`]: validated thresholds, actions, tool matchers, patterns.
//! - [`outcome`]: a tool result → normalised hash, error flag, fingerprint;
//!   `echo` (what a failure repeats of its call's arguments) and
//!   `json_volatile` (leaves that change between a call's successive JSON
//!   results) feed it.
//! - `step`: a transcript → tool cycles, text turns, user texts.
//! - [`session`]: [`SessionState`], per session lane — merges requests,
//!   judges them (request time) and pending calls (stream time).
//! - `view`: what a detector sees (the judged view) and the shared no-progress rule.
//! - `engine`: the detector list, run over a view.
//! - one file per detector: [`identical_call`], [`cycle`], [`generic_repeat`],
//!   [`poll_no_progress`], [`error_repeat`], [`consecutive_failures`],
//!   [`tool_budget`], [`unknown_tool`], [`content_chanting`] (stream text,
//!   [`ContentScanner`]), [`repeated_message`], [`post_compaction`],
//!   [`compaction_storm`], [`circuit_breaker`], [`replay_storm`],
//!   [`novelty`] (issue #38: calls that bring back nothing new).
//! - [`verdict`]: levels, actions, [`Verdict`] and ranking.
//! - [`compaction`]: summarizer and compacted-request recognition.
//! - [`rerun`]: the detectors over a recorded session (the core of `loopguard replay`).
//!
//! Usage from the proxy, per request of a session lane:
//!
//! ```
//! use std::time::Duration;
//! use loopguard::detect::{ContentScanner, SessionState, Settings, decisive};
//! # let transcript = loopguard::transcript::Transcript::default();
//! let settings = Settings::default(); // or config.loop_detection.select(headers).1
//! let mut session = SessionState::new();
//! let verdicts = session.on_request(&transcript, Duration::from_secs(0), &settings);
//! if let Some(v) = decisive(&verdicts) { println!("{} → {}", v.message, v.action.name()); }
//! let scanner = ContentScanner::new(&settings); // per response, fed each stream event
//! let held = session.judge_pending(&[], Duration::from_secs(1), &settings);
//! # let _ = (held, scanner.verdict());
//! ```

pub mod circuit_breaker;
pub mod compaction;
pub mod compaction_storm;
pub mod consecutive_failures;
pub mod content_chanting;
pub mod cycle;
mod echo;
mod engine;
pub mod error_repeat;
pub mod generic_repeat;
pub mod identical_call;
pub(crate) mod identity;
mod json_volatile;
pub(crate) mod memo;
pub mod novelty;
pub mod outcome;
pub mod poll_no_progress;
pub mod post_compaction;
pub mod repeated_message;
pub mod replay_storm;
pub mod rerun;
pub mod session;
pub mod settings;
mod step;
mod view;
pub(crate) use crate::redact::truncate;
pub(crate) use step::{UserText as StepUserText, classify_user};
pub mod tool_budget;
pub mod unknown_tool;
pub mod verdict;

#[cfg(test)]
pub(crate) mod testkit;

pub use compaction::{Classification, RequestSummary, classify, classify_summarized, is_summarizer};
pub use content_chanting::{Channel, ContentScanner};
pub use outcome::{Outcome, outcome_for, outcome_of};
pub use rerun::{ReplayLine, replay};
pub use session::{Absorbed, CallView, SessionState};
pub use settings::{Settings, Thresholds, ToolMatcher};
pub use verdict::{Action, DetectorKind, Level, Verdict, decisive, rank};
#[cfg(test)]
mod chanting_tests;
#[cfg(test)]
mod compaction_tests;
#[cfg(test)]
mod config_tests;
#[cfg(test)]
mod known_tests;
#[cfg(test)]
mod novelty_tests;
#[cfg(test)]
mod rewrite_tests;
#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod session_scenarios;
