//! Unit tests of scripted answers.
use super::*;

fn parse(text: &str) -> Script {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_json_constrained_request_gets_an_instance_of_its_schema() {
    let script = Script::default_loop();
    let gemini = json!({"contents": [], "generationConfig": {"responseMimeType": "application/json",
        "responseJsonSchema": {"type": "OBJECT", "properties": {
            "complexity_reasoning": {"type": "STRING"},
            "complexity_score": {"type": "INTEGER"},
            "next_speaker": {"type": "string", "enum": ["user", "model"]},
            "confidence": {"type": ["number", "null"], "minimum": 0.1},
            "flags": {"type": "array", "items": {"type": "string"}},
            "done": {"type": "boolean"}}}}});
    let answer = script.answer(&gemini);
    assert!(answer.tool_calls.is_empty());
    let value: Value = serde_json::from_str(&answer.text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        value,
        json!({"complexity_reasoning": "mock", "complexity_score": 1, "next_speaker": "user",
            "confidence": 0.1, "flags": [], "done": false})
    );
    let openai = json!({"messages": [], "response_format": {"type": "json_schema",
        "json_schema": {"name": "t", "schema": {"type": "object", "properties": {"title": {"type": "string"}}}}}});
    assert_eq!(script.answer(&openai).text, r#"{"title":"mock"}"#);
    let scripted = parse(r#"{"turns": [], "json": {"next_speaker": "user"}}"#);
    assert_eq!(
        scripted
            .answer(&json!({"response_format": {"type": "json_object"}}))
            .text,
        r#"{"next_speaker":"user"}"#
    );
}

#[test]
fn no_tools_answers_only_requests_without_tools_and_only_when_scripted() {
    let script = parse(
        r#"{"turns": [{"tool_calls": [{"name": "read", "arguments": {"filePath": "a"}}]}],
            "no_tools": {"text": "A title"}}"#,
    );
    let bare = json!({"messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(script.answer(&bare).text, "A title");
    let with_tools = json!({"messages": [], "tools": [{"type": "function", "function": {"name": "read"}}]});
    assert_eq!(script.answer(&with_tools).tool_calls[0].name, "read");
    let gemini_empty = json!({"contents": [], "tools": [{"functionDeclarations": []}]});
    assert_eq!(script.answer(&gemini_empty).text, "A title");
    // Without `no_tools`, a tool-less request walks the turns as before.
    assert_eq!(
        Script::default_loop().answer(&bare).tool_calls[0].name,
        "list_directory"
    );
}

#[test]
fn stop_after_ends_the_loop_with_the_final_turn() {
    let script = parse(
        r#"{"turns": [{"tool_calls": [{"name": "read"}]}], "stop_after": 2, "final": {"text": "All done"}}"#,
    );
    let history = |n: usize| {
        let mut messages = vec![json!({"role": "user", "content": "go"})];
        for _ in 0..n {
            messages.push(json!({"role": "assistant"}));
            messages.push(json!({"role": "tool", "content": "x"}));
        }
        json!({"messages": messages, "tools": [{"type": "function"}]})
    };
    assert_eq!(script.answer(&history(1)).tool_calls.len(), 1);
    assert_eq!(script.answer(&history(2)).text, "All done");
    assert!(script.answer(&history(5)).tool_calls.is_empty());
    let default_final = parse(r#"{"turns": [], "stop_after": 0}"#);
    assert_eq!(default_final.answer(&history(0)).text, "Done.");
}

#[test]
fn unknown_script_keys_are_rejected() {
    assert!(serde_json::from_str::<Script>(r#"{"turns": [], "stop_afer": 3}"#).is_err());
}

#[test]
fn deltas_keep_every_character() {
    let text = "one two three four five six seven";
    assert_eq!(deltas(text).concat(), text);
    assert!(deltas(text).len() > 1);
}

#[test]
fn the_turn_follows_the_history_and_the_last_one_repeats() {
    let script = Script::from_turns(vec![
        Turn {
            text: "a".into(),
            ..Turn::default()
        },
        Turn {
            text: "b".into(),
            ..Turn::default()
        },
    ]);
    let body = json!({"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "tool"}]});
    assert_eq!(script.turn(assistant_turns(&body)).text, "b");
    assert_eq!(script.turn(7).text, "b");
    assert_eq!(script.turn(0).text, "a");
}

#[test]
fn openai_stream_splits_arguments_into_fragments_that_rejoin() {
    let turn = Script::default_loop().turn(0);
    let chunks = openai_stream(&turn, "m", 1, true);
    let args: String = chunks
        .iter()
        .filter_map(|c| serde_json::from_str::<Value>(c).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(args, r#"{"path":"."}"#);
    assert!(chunks.last().is_some_and(|c| c.contains("\"usage\"")));
}
