//! `loopguard demo` shows a loop stopped in every dialect, without streaming
//! and with `abort`, and says what to try next.

use std::process::Command;

/// The demo runs to the end and tells, for each run, that the looping call
/// was warned about (the warning in full, with where the request carried
/// it), then withheld from the model's stream or answer (or, with `abort`,
/// answered with an HTTP 400), and ends with what to try next.
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
    // Two warnings in each of the four streaming runs and the non-streaming
    // one; the abort run's second request is answered by the abort.
    assert_eq!(
        stdout
            .matches("forwarded with a warning for the model, carried in")
            .count(),
        11,
        "{stdout}"
    );
    assert_eq!(
        stdout
            .matches(
                "Use the result you already received instead of repeating the call, or change the arguments."
            )
            .count(),
        11 + 5 + 1,
        "every warning, block and abort message is shown in full: {stdout}"
    );
    for carrier in [
        "carried in messages[6].content:",
        "carried in contents[6].parts[0].functionResponse.response.loopguard_warning:",
        "carried in input[6].output:",
        "carried in messages[6].content[1].text:",
    ] {
        assert!(stdout.contains(carrier), "{carrier}: {stdout}");
    }
    assert_eq!(
        stdout
            .matches("withheld call 5 to list_directory from the model's stream")
            .count(),
        5 - 1,
        "{stdout}"
    );
    assert_eq!(
        stdout
            .matches("withheld call 5 to list_directory from the model's answer")
            .count(),
        1,
        "{stdout}"
    );
    assert!(
        stdout.contains("agent receives an error (HTTP 400)") && stdout.contains("loop_detected"),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches("the looping call never reached it").count(),
        6,
        "{stdout}"
    );
    for dialect in ["openai-chat", "gemini", "openai-responses", "anthropic"] {
        assert!(
            stdout.contains(&format!("=== {dialect} (streaming)")),
            "{dialect}: {stdout}"
        );
    }
    assert!(stdout.contains("=== openai-chat (not streaming)"), "{stdout}");
    let next = stdout
        .split("Try next:")
        .nth(1)
        .unwrap_or_else(|| panic!("no 'Try next': {stdout}"));
    for hint in [
        "loopguard replay --summary",
        "loopguard serve",
        "mock-upstream",
        "/ui",
    ] {
        assert!(next.contains(hint), "{hint}: {next}");
    }
}
