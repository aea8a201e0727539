//! Unit tests of call identity: which calls are "the same call".

use super::*;
use serde_json::json;

fn id(name: &str, args: Value) -> Signature {
    of(
        &ToolCall::new(None, name, Arguments::Json(args)),
        &Settings::default(),
    )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// The allocation-free shortcut (`unchanged`) only ever says
    /// "unchanged" when normalising really changes nothing.
    #[test]
    fn the_shortcut_agrees_with_normalising(value in arguments()) {
        let call = ToolCall::new(None, "t", Arguments::Json(value.clone()));
        if let Value::Object(map) = &value {
            proptest::prop_assert_eq!(of(&call, &Settings::default()), normalised("t", map, &["justification", "max_output_tokens"]));
        }
    }
}

fn arguments() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let words = prop::sample::select(vec![
        "a",
        "src/",
        "/",
        " a",
        "a b",
        "x://y",
        "https://x.org/p/?utm_source=1&q=2",
        "ls -la  src/",
        "grep -rn x .",
        "",
    ]);
    let leaf = prop_oneof![
        words.prop_map(|w| Value::String(w.to_owned())),
        any::<i32>().prop_map(Value::from),
        Just(Value::Null),
    ];
    let keys = prop::sample::select(vec![
        "path",
        "command",
        "Cmd",
        "command_line",
        "url",
        "justification",
        "n",
    ]);
    leaf.prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
    .prop_map(|v| match v {
        Value::Object(_) => v,
        other => serde_json::json!({"path": other}),
    })
}

#[test]
fn neutral_rewrites_of_a_command_are_the_same_call() {
    let a = id("bash", json!({"command": "ls -la src/"}));
    for c in [
        "ls  -al src",
        "ls -a -l 'src'",
        "ls -l -a \"src/\"  # again",
        "ls \\\n -la src",
    ] {
        assert_eq!(a, id("bash", json!({"command": c})), "{c}");
    }
    assert_eq!(
        id("exec_command", json!({"cmd": ["bash", "-lc", "grep -rn foo ."]})),
        id(
            "exec_command",
            json!({"cmd": ["bash", "-lc", "grep -n -r foo ."], "justification": "x"})
        )
    );
}

#[test]
fn paths_words_and_url_paths_are_never_trivial() {
    let a = id("bash", json!({"command": "ls -la src/a"}));
    assert_ne!(a, id("bash", json!({"command": "ls -la src/b"})));
    assert_ne!(a, id("bash", json!({"command": "ls -la 'src/a b'"})));
    assert_ne!(
        id("bash", json!({"command": "echo a; rm x"})),
        id("bash", json!({"command": "echo a rm x"}))
    );
    let u = id("fetch", json!({"url": "https://x.org/docs/?utm_source=a&q=1"}));
    assert_eq!(u, id("fetch", json!({"url": "https://x.org/docs?q=1&fbclid=9"})));
    assert_ne!(u, id("fetch", json!({"url": "https://x.org/doc?q=1"})));
    assert_ne!(u, id("fetch", json!({"url": "https://x.org/docs?q=2"})));
}

#[test]
fn free_text_is_dropped_only_where_configured() {
    assert_eq!(
        id(
            "Bash",
            json!({"command": "npm test", "description": "a", "timeout": 1})
        ),
        id("Bash", json!({"command": "npm test", "description": "b"}))
    );
    assert_ne!(
        id("Bash", json!({"command": "npm test", "run_in_background": true})),
        id("Bash", json!({"command": "npm test"}))
    );
    assert_ne!(
        id("create_issue", json!({"title": "t", "description": "a"})),
        id("create_issue", json!({"title": "t", "description": "b"}))
    );
}

fn loose_of(name: &str, args: Value) -> u64 {
    loose(
        &ToolCall::new(None, name, Arguments::Json(args)),
        &Settings::default(),
    )
}

#[test]
fn respellings_of_one_command_share_a_spelling_free_key() {
    let key = loose_of("bash", json!({"command": "ls -la src"}));
    for spelling in [
        "ls -al src/",
        "ls -l -a ./src",
        "ls src -la | cat",
        "ls -a -l  src/ | cat",
        "ls -la -- src",
        "ls -lla src",
    ] {
        assert_eq!(loose_of("bash", json!({"command": spelling})), key, "{spelling}");
    }
    assert_eq!(
        loose_of("grep", json!({"pattern": "foo", "path": "./src/"})),
        loose_of("grep", json!({"path": "src", "pattern": "foo"}))
    );
    assert_eq!(
        loose_of("bash", json!({"command": "git log --format=%s"})),
        loose_of("bash", json!({"command": "git log --format %s"}))
    );
    let health = loose_of("http_get", json!({"url": "http://localhost:8080/health"}));
    for url in [
        "https://127.0.0.1:8080/health/",
        "http://0.0.0.0:8080/health?_=1733550000",
        "http://localhost:8080/health?nonce=a7f3",
    ] {
        assert_eq!(loose_of("http_get", json!({"url": url})), health, "{url}");
    }
    assert_ne!(
        loose_of("http_get", json!({"url": "http://localhost:8081/health"})),
        health
    );
    assert_ne!(
        loose_of("http_get", json!({"url": "http://localhost:8080/ready"})),
        health
    );
    assert_ne!(
        loose_of(
            "http_get",
            json!({"url": "http://localhost:8080/health?page=last"})
        ),
        health
    );
}

#[test]
fn another_target_word_or_tool_is_another_spelling_free_key() {
    let key = loose_of("bash", json!({"command": "ls -la src"}));
    for other in [
        "ls -la lib",
        "ls -la src/app",
        "ls -l src",
        "ls -la src | wc -l",
        "cat src",
    ] {
        assert_ne!(loose_of("bash", json!({"command": other})), key, "{other}");
    }
    assert_ne!(loose_of("sh", json!({"command": "ls -la src"})), key);
    assert_ne!(
        loose_of("read_file", json!({"path": "a.py"})),
        loose_of("read_file", json!({"file": "a.py"}))
    );
}
