//! `loopguard demo` shows a loop stopped in every dialect.

use std::process::Command;

/// The demo runs to the end and tells, for each dialect, that the looping
/// call was warned about and then never reached the agent.
#[test]
fn demo_stops_the_loop_in_every_dialect() {
    let out = Command::new(env!("CARGO_BIN_EXE_loopguard"))
        .arg("demo")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("forwarded with a warning").count(), 8, "{stdout}");
    assert_eq!(
        stdout.matches("the looping call never reached it").count(),
        4,
        "{stdout}"
    );
    for dialect in ["openai-chat", "gemini", "openai-responses", "anthropic"] {
        assert!(stdout.contains(&format!("=== {dialect} ")), "{dialect}: {stdout}");
    }
}
