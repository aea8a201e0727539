//! The typed read of request history items (`super::super::item`) against
//! the `Value` read it stands in for.

use serde_json::value::RawValue;

use super::*;

/// `items` parsed the way a split body is (typed where it can), and their
/// `Value`s parsed alone; `None` for a read that failed.
fn both_reads(
    before: &[HistoryItem],
    items: &[&RawValue],
) -> (Option<Vec<HistoryItem>>, Option<Vec<HistoryItem>>) {
    let typed = parse_raw(before, items).ok();
    let values: Option<Vec<Value>> = items
        .iter()
        .map(|raw| serde_json::from_str(raw.get()).ok())
        .collect();
    (typed, values.map(|values| parse_items(before, &values)))
}

fn raw(json: &str) -> Box<RawValue> {
    RawValue::from_string(json.to_owned()).unwrap_or_else(|e| panic!("{json}: {e}"))
}

/// Every request of every recorded trajectory: each history item is read
/// in the typed form (none needs the `Value` read), and the history is the
/// one the `Value` read gives, whole and taken up again after each item.
#[test]
fn the_typed_item_read_agrees_with_the_value_read_on_recorded_trajectories() {
    let dir = std::env::var_os("LOOPGUARD_TRAJECTORIES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/trajectories")
        });
    let (mut files, mut items) = (0, 0);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (set LOOPGUARD_TRAJECTORIES)", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // The last request carries the whole history.
        let Some(body) = text.lines().rfind(|l| !l.trim().is_empty()) else {
            continue;
        };
        let split = split_request(body.as_bytes()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for item in &split.items {
            assert!(
                super::super::item::read(item.get()).is_some(),
                "{}: {}",
                path.display(),
                item.get()
            );
        }
        let (typed, lenient) = both_reads(&[], &split.items);
        assert!(
            typed.as_ref().is_some_and(|t| !t.is_empty()),
            "{}",
            path.display()
        );
        assert_eq!(typed, lenient, "{}", path.display());
        // Piece by piece, each piece given the parses before it.
        let whole = typed.unwrap_or_default();
        for at in 1..split.items.len() {
            let (typed, lenient) = both_reads(&whole[..at], &split.items[at..]);
            assert_eq!(typed, lenient, "{} from item {at}", path.display());
            assert_eq!(
                typed.as_deref(),
                Some(&whole[at..]),
                "{} from item {at}",
                path.display()
            );
        }
        assert_eq!(
            assemble_request(body),
            parse_request(body.as_bytes()).ok(),
            "{}",
            path.display()
        );
        files += 1;
        items += split.items.len();
    }
    assert!(
        files >= 40 && items > 1000,
        "{files} trajectories, {items} items in {}",
        dir.display()
    );
}

/// `body` split and its items read as the proxy reads them.
fn assemble_request(body: &str) -> Option<ParsedRequest> {
    let split = split_request(body.as_bytes()).ok()?;
    let items = split.parse_items(&[], 0).ok()?;
    Some(crate::dialect::split::assemble(split.head, items))
}

/// Shapes the typed read refuses or reads differently from the usual
/// (wrong types, `null`s, non-objects, keys given twice, escapes, every
/// content and call form): the same items as the `Value` read, alone and
/// after an assistant item whose calls a tool item can name.
#[test]
fn the_typed_item_read_agrees_with_the_value_read_on_odd_shapes() {
    const TYPED: bool = false;
    const REFUSED: bool = true;
    // Each shape, and whether the typed read refuses it (wrong types, keys
    // given twice and non-objects fall back to the `Value` read; every
    // other shape is read typed).
    let odd = [
        (r#"{"role":"user","content":"plain"}"#, TYPED),
        (r#"{"role":"user","content":"a\"b\u00e9\n"}"#, TYPED),
        (r#"{"role":"user","content":null}"#, TYPED),
        (r#"{"role":"user"}"#, TYPED),
        (r#"{"role":"user","content":7}"#, REFUSED),
        (r#"{"role":"user","content":{"text":"obj"}}"#, REFUSED),
        (r#"{"role":"user","content":[]}"#, TYPED),
        (r#"{"role":"user","content":["a","b\u0021"]}"#, TYPED),
        (
            r#"{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_text","text":"b"},{"text":"c"}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"},"text":"hidden"},{"type":"text"}]}"#,
            TYPED,
        ),
        (r#"{"role":"user","content":[{"type":5,"text":"a"}]}"#, REFUSED),
        (r#"{"role":"user","content":[{"type":"text","text":5}]}"#, REFUSED),
        (
            r#"{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}"#,
            REFUSED,
        ),
        (r#"{"role":"user","content":[3,null,["x"],"y"]}"#, REFUSED),
        (r#"{"role":"user","content":"a","content":"b"}"#, REFUSED),
        (r#"{"role":"user","role":"assistant","content":"twice"}"#, REFUSED),
        (r#"{"role":7,"content":"number"}"#, REFUSED),
        (r#"{"role":null,"content":"null role"}"#, TYPED),
        (r#"{"content":"no role"}"#, TYPED),
        (r#"{"role":"system","content":"late system"}"#, TYPED),
        (
            r#"{"role":"developer","content":[{"type":"text","text":"dev"}]}"#,
            TYPED,
        ),
        (r#"{"role":"critic","content":"unknown role"}"#, TYPED),
        (
            r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c2","type":"function","function":{"name":"ls","arguments":"{\"d\":\".\"}"}}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"assistant","content":"t","tool_calls":[{"id":"","function":{"name":"ls","arguments":""}},{"function":{"name":"cat","arguments":"not json"}}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"assistant","tool_calls":[{"id":"c3","function":{"name":"f","arguments":{"b":1,"a":[2]}}}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"assistant","tool_calls":[{"id":"c3","function":{"name":"f","arguments":12}}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"assistant","tool_calls":[{"id":"c3","function":{"name":"f","arguments":null}}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"assistant","tool_calls":[{"id":"c3","function":{"name":"f"}}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"assistant","tool_calls":[{"id":"c3","function":null}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"assistant","tool_calls":[{"id":"c3","function":"f"}]}"#,
            REFUSED,
        ),
        (r#"{"role":"assistant","tool_calls":[{"id":"c3"}]}"#, TYPED),
        (
            r#"{"role":"assistant","tool_calls":[{"id":5,"function":{"name":"f"}}]}"#,
            REFUSED,
        ),
        (
            r#"{"role":"assistant","tool_calls":[{"id":"c3","function":{"name":7}}]}"#,
            REFUSED,
        ),
        (
            r#"{"role":"assistant","tool_calls":["c3",{"id":"c4","function":{"name":"f"}}]}"#,
            REFUSED,
        ),
        (r#"{"role":"assistant","tool_calls":{"id":"c3"}}"#, REFUSED),
        (
            r#"{"role":"assistant","tool_calls":null,"function_call":null}"#,
            TYPED,
        ),
        (
            r#"{"role":"assistant","function_call":{"name":"legacy","arguments":"{}"}}"#,
            TYPED,
        ),
        (r#"{"role":"assistant","function_call":"legacy"}"#, REFUSED),
        (r#"{"role":"assistant","function_call":["legacy"]}"#, REFUSED),
        (
            r#"{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"renamed"}}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"user","tool_calls":[{"id":"u1","function":{"name":"ignored"}}]}"#,
            TYPED,
        ),
        (r#"{"role":"tool","tool_call_id":"c1","content":"result"}"#, TYPED),
        (
            r#"{"role":"tool","tool_call_id":"c1","name":"own","content":"result"}"#,
            TYPED,
        ),
        (
            r#"{"role":"tool","tool_call_id":"unknown","name":"own","content":"result"}"#,
            TYPED,
        ),
        (
            r#"{"role":"tool","tool_call_id":"unknown","content":"result"}"#,
            TYPED,
        ),
        (
            r#"{"role":"tool","tool_call_id":7,"name":"own","content":"result"}"#,
            REFUSED,
        ),
        (
            r#"{"role":"tool","name":"own","content":[{"type":"text","text":"r"}]}"#,
            TYPED,
        ),
        (
            r#"{"role":"tool","tool_call_id":"c\u0031","content":"escaped id"}"#,
            TYPED,
        ),
        (r#"{"role":"function","name":"legacy","content":"r"}"#, TYPED),
        (r#"{"role":"function","content":"r"}"#, TYPED),
        (
            r#"{"role":"user","content":"x","extra":{"nested":[1,{"a":null}]},"name":"someone"}"#,
            TYPED,
        ),
        (r#"["user","positional"]"#, REFUSED),
        (r#""a string""#, REFUSED),
        ("null", REFUSED),
        ("12", REFUSED),
    ];
    let assistant = raw(
        r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a\"}"}}]}"#,
    );
    let system = raw(r#"{"role":"system","content":"sys"}"#);
    let tool = raw(r#"{"role":"tool","tool_call_id":"c1","content":"result"}"#);
    for (item, _) in odd {
        let item = raw(item);
        // Alone; after a system item; after the assistant item in the same
        // batch; followed by a tool result naming the assistant's call (an
        // item that names that call again renames it: later calls win); and
        // after them parsed earlier (given as `before`).
        for items in [
            vec![&*item],
            vec![&*system, &*item],
            vec![&*system, &*assistant, &*item],
            vec![&*system, &*assistant, &*item, &*tool],
        ] {
            let (typed, lenient) = both_reads(&[], &items);
            assert!(lenient.is_some(), "{}", item.get());
            assert_eq!(typed, lenient, "{} after {} items", item.get(), items.len() - 1);
        }
        let before = parse_items(
            &[],
            &[
                serde_json::from_str(system.get()).unwrap(),
                serde_json::from_str(assistant.get()).unwrap(),
            ],
        );
        let (typed, lenient) = both_reads(&before, &[&*item]);
        assert_eq!(typed, lenient, "{} after items parsed earlier", item.get());
    }
    // Which read each shape takes, pinned (the comparisons above would
    // pass without the typed read at all).
    for (shape, refused) in odd {
        assert_eq!(
            super::super::item::read(shape).is_none(),
            refused,
            "{shape}: refused by the typed read?"
        );
    }
}

/// A value the `Value` read cannot hold, in a field loopguard does not
/// read, leaves the item readable: the `Value` read refuses it (and with it
/// the request), the typed read still sees its text and calls.
#[test]
fn an_unreadable_value_in_an_unread_item_field_hides_nothing_else() {
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let items = [
        r#"{"role":"assistant","content":"hi","tool_calls":[{"id":"c","function":{"name":"ls","arguments":"{}"}}],"x":"\ud83d"}"#.to_owned(),
        r#"{"role":"assistant","content":"hi","tool_calls":[{"id":"c","function":{"name":"ls","arguments":"{}"}}],"x":1e400}"#.to_owned(),
        format!(r#"{{"role":"assistant","x":{deep},"content":"hi","tool_calls":[{{"id":"c","function":{{"name":"ls","arguments":"{{}}"}}}}]}}"#),
    ];
    for item in &items {
        let item = raw(item);
        assert!(
            serde_json::from_str::<Value>(item.get()).is_err(),
            "{}",
            item.get()
        );
        let parsed = parse_raw(&[], &[&*item]).unwrap_or_else(|e| panic!("{}: {e}", item.get()));
        let [HistoryItem::Message(message)] = parsed.as_slice() else {
            panic!("{}: {parsed:?}", item.get());
        };
        assert_eq!(message.text, "hi");
        assert_eq!(message.tool_calls.len(), 1);
        assert_eq!(message.tool_calls[0].name, "ls");
    }
    // The same value in a field loopguard reads still fails the item.
    let read_field = raw(r#"{"role":"user","content":"\ud83d"}"#);
    assert!(parse_raw(&[], &[&*read_field]).is_err());
}

/// A tool result whose call is further back than the recent items looked
/// at first is named from the index of every earlier call, in both reads.
#[test]
fn a_tool_result_names_a_call_far_back_in_both_reads() {
    let call = |n: usize| {
        format!(
            r#"{{"role":"assistant","tool_calls":[{{"id":"c{n}","function":{{"name":"tool{n}","arguments":"{{}}"}}}}]}}"#
        )
    };
    let result = |n: usize| format!(r#"{{"role":"tool","tool_call_id":"c{n}","content":"r{n}"}}"#);
    let earlier: Vec<Value> = (0..100)
        .flat_map(|n| [call(n), result(n)])
        .map(|item| serde_json::from_str(&item).unwrap())
        .collect();
    let before = parse_items(&[], &earlier);
    let late = raw(&result(0));
    let (typed, lenient) = both_reads(&before, &[&*late]);
    assert_eq!(typed, lenient);
    let named = typed
        .as_deref()
        .and_then(|items| items.first())
        .and_then(|item| item.messages().first())
        .and_then(|m| m.tool_results.first())
        .and_then(|r| r.name.clone());
    assert_eq!(named.as_deref(), Some("tool0"));
}
