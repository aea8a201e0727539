//! `novelty` through `SessionState`, in both dialect shapes: the run, its
//! turn floor, its epoch bounds (the person, a compaction), its message.

use serde_json::json;

use super::testkit::{DIALECTS, Run, level};
use super::{DetectorKind as D, Level as L};
use crate::transcript::Role;

const TOOLS: &[&str] = &["bash", "read_file"];
const A: &str = "listing: app.py util.py tests/ README.md setup.cfg pyproject.toml requirements.txt";
const B: &str =
    "def main():\n    print(util.add(2, 3))\n# the entry point of the app, unchanged since the last read";

/// Alternates two respelled reads whose results never change: warned at
/// the 6th stale call, critical at the 10th (calls 8 and 12 of the run).
fn alternate(r: &mut Run, n: usize) -> Vec<Option<L>> {
    (0..n)
        .map(|i| {
            let (cmd, out) = if i % 2 == 0 {
                (["ls -la", "ls -al ."][i / 2 % 2], A)
            } else {
                (["cat app.py", "cat ./app.py"][i / 2 % 2], B)
            };
            level(&r.call("bash", json!({"command": cmd}), out, false), D::Novelty)
        })
        .collect()
}

#[test]
fn a_run_of_stale_results_is_warned_at_6_and_critical_at_10() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        let levels = alternate(&mut r, 12);
        let expect: Vec<Option<L>> = (0..12)
            .map(|i| match i {
                0..=6 => None,
                7..=10 => Some(L::Warning),
                _ => Some(L::Critical),
            })
            .collect();
        assert_eq!(levels, expect, "{d:?}");
    }
}

/// A compaction starts a new epoch: results received before it are news
/// again to the compacted agent.
#[test]
fn results_received_before_a_compaction_are_news_after_it() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        let before = alternate(&mut r, 9);
        assert_eq!(before.last().copied().flatten(), Some(L::Warning), "{d:?}");
        r.session.note_compaction();
        let after = alternate(&mut r, 7);
        assert!(after.iter().all(Option::is_none), "{d:?}: {after:?}");
    }
}

/// The person speaking starts a new epoch too.
#[test]
fn the_person_speaking_restarts_the_run() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        alternate(&mut r, 9);
        r.b.say(Role::User, "Look at util.py instead.");
        let after = alternate(&mut r, 7);
        assert!(after.iter().all(Option::is_none), "{d:?}: {after:?}");
    }
}

/// A stale run must span three assistant turns: one turn of parallel calls
/// that all fail alike is one exploration.
#[test]
fn a_run_within_two_turns_is_not_counted() {
    for d in DIALECTS {
        let mut r = Run::new(d, TOOLS);
        let fail = "Error: ENOENT: no such file or directory";
        let batch: Vec<(&str, serde_json::Value, &str, bool)> = (0..8)
            .map(|i| ("read_file", json!({"path": format!("cfg{i}.yaml")}), fail, true))
            .collect();
        r.b.calls(&batch);
        assert_eq!(level(&r.send(), D::Novelty), None, "{d:?}");
        r.b.calls(&batch[..4]);
        assert_eq!(level(&r.send(), D::Novelty), None, "{d:?}");
        r.b.call("read_file", json!({"path": "cfg9.yaml"}), fail, true);
        assert_eq!(
            level(&r.send(), D::Novelty),
            Some(L::Critical),
            "{d:?}: three turns, 12 stale"
        );
    }
}

/// The message names the tools and the epoch bound, and the count.
#[test]
fn the_message_names_the_run() {
    let mut r = Run::new(super::testkit::Dialect::OpenAi, TOOLS);
    let mut last = Vec::new();
    for i in 0..8 {
        let (cmd, out) = if i % 2 == 0 {
            ("ls -la", A)
        } else {
            ("cat app.py", B)
        };
        last = r.call("bash", json!({"command": cmd}), out, false);
    }
    let v = last
        .iter()
        .find(|v| v.detector == D::Novelty)
        .map(|v| v.message.clone());
    insta::assert_snapshot!(v.unwrap_or_default(), @r#"[loopguard] novelty (warning, count 6): `bash` with {"command":"cat app.py"} and the 5 calls before it (`bash`) brought back only results already received since the person last spoke. Every result of these calls repeats one you already received: rephrasing or retrying the command will not change it. Use what you already have, try a genuinely different approach, or ask the user."#);
}
