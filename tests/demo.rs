//! `loopguard demo` shows a loop stopped in both dialects.

use std::process::Command;

/// The demo runs to the end and tells, for each dialect, that the looping
/// call was warned about and then never reached the agent.
#[test]
fn demo_stops_the_loop_in_both_dialects() {
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
    assert_eq!(stdout.matches("forwarded with a warning").count(), 4, "{stdout}");
    assert_eq!(
        stdout.matches("the looping call never reached it").count(),
        2,
        "{stdout}"
    );
    assert!(stdout.contains("=== openai-chat") && stdout.contains("=== gemini"));
}
