//! Tests of the hash-chain parse: the request it gives is always the full
//! parse's, and it reuses what it should.

use std::collections::HashMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::index::{END_WINDOW, Slot};
use super::*;

impl ChainStore {
    /// Asserts the indexes hold exactly the kept chains' hashes: each end
    /// names its newest chain, each hash its holders (tests).
    fn assert_indexed(&self) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(
            inner.order.len(),
            inner.chains.len(),
            "every chain has a place in the order"
        );
        // The chains from the least recently used.
        let slots: Vec<(u64, &Slot)> = inner
            .order
            .iter()
            .map(|(tick, id)| {
                let slot = &inner.chains[id];
                assert_eq!(slot.tick, *tick, "a chain's tick is its place in the order");
                (*id, slot)
            })
            .collect();
        let out = slots.iter().filter(|(_, slot)| slot.out).count();
        assert_eq!(out, inner.out, "chains out counted");
        let weight: usize = slots
            .iter()
            .filter(|(_, slot)| !slot.out)
            .map(|(_, slot)| slot.chain.kept_weight())
            .sum();
        assert_eq!(weight, inner.bytes, "kept chains weighed");
        let mut prefixes: HashMap<u128, u32> = HashMap::new();
        for (_, slot) in &slots {
            for hash in &slot.chain.hashes {
                *prefixes.entry(*hash).or_default() += 1;
            }
        }
        // An end names a chain ending there (one whose chain left is
        // forgotten, not pointed elsewhere).
        for (end, id) in &inner.ends {
            let last = inner.chains.get(id).map(|slot| slot.chain.hashes.last());
            assert_eq!(last, Some(Some(end)), "an end names a chain ending there");
        }
        assert_eq!(prefixes.len(), inner.prefixes.len(), "every held hash is indexed");
        for (hash, holders) in &inner.prefixes {
            assert_eq!(prefixes.get(hash), Some(&holders.count), "holders counted");
            if let Some(id) = holders.last {
                let holds = inner.chains.get(&id).map(|slot| slot.chain.hashes.contains(hash));
                assert_eq!(holds, Some(true), "the last holder is there and holds the hash");
            }
        }
        let mut by_bytes: HashMap<u128, Vec<u64>> = HashMap::new();
        for (id, slot) in &slots {
            if let Some(prefix) = &slot.chain.bytes {
                assert!(!slot.out, "a chain out has no byte prefix");
                by_bytes.entry(prefix.group).or_default().push(*id);
            }
        }
        let indexed: HashMap<u128, Vec<u64>> = inner
            .by_bytes
            .iter()
            .map(|(group, ids)| (*group, ids.clone()))
            .collect();
        assert_eq!(by_bytes, indexed, "every byte prefix is indexed, oldest first");
    }

    /// Chains kept or out with a request (tests).
    fn slots(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .chains
            .len()
    }
}

const SCOPE: &[u8] = b"tenant\0/v1";

/// A store that resumes even the tests' small bodies after their bytes.
fn store() -> ChainStore {
    ChainStore::new(Duration::from_secs(3600)).with_byte_prefix_from(16)
}

fn openai(messages: &[Value]) -> Vec<u8> {
    json!({"model": "m", "stream": true, "messages": messages,
        "tools": [{"type": "function", "function": {"name": "read_file"}}]})
    .to_string()
    .into_bytes()
}

fn gemini(contents: &[Value]) -> Vec<u8> {
    json!({"systemInstruction": {"parts": [{"text": "be brief"}]}, "contents": contents,
        "tools": [{"functionDeclarations": [{"name": "ls"}]}]})
    .to_string()
    .into_bytes()
}

fn anthropic(messages: &[Value]) -> Vec<u8> {
    json!({"model": "claude", "max_tokens": 100, "system": [{"type": "text", "text": "be brief"}],
        "messages": messages, "tools": [{"name": "Bash"}]})
    .to_string()
    .into_bytes()
}

fn responses(input: &[Value]) -> Vec<u8> {
    json!({"model": "gpt-5", "instructions": "be brief", "input": input, "store": false,
        "tools": [{"type": "function", "name": "exec_command"}]})
    .to_string()
    .into_bytes()
}

/// Parses `body` through the store, asserts the full parse gives the same,
/// and returns how many items were reused.
fn check(store: &ChainStore, dialect: Dialect, body: &[u8]) -> usize {
    let full = dialect.parse_request(body);
    let reusing = store.parse_reusing(dialect, SCOPE, body);
    store.assert_indexed();
    match reusing {
        Ok((parsed, reused)) => {
            assert_eq!(
                Some(&parsed),
                full.as_ref().ok(),
                "{}",
                String::from_utf8_lossy(body)
            );
            reused
        }
        Err(_) => {
            assert!(
                full.is_err(),
                "only the chain parse failed: {}",
                String::from_utf8_lossy(body)
            );
            0
        }
    }
}

fn call(id: &str, name: &str) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
        "function": {"name": name, "arguments": "{\"path\":\"a\"}"}}]})
}

fn result(id: &str, text: &str) -> Value {
    json!({"role": "tool", "tool_call_id": id, "content": text})
}

/// The usual turn: the history grows by a call and its result; only those
/// are parsed, and the result's tool name comes from a call in the reused part.
#[test]
fn appended_items_are_the_only_ones_parsed() {
    let s = store();
    let mut history = vec![
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": "go"}),
    ];
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history)), 0);
    history.push(call("c1", "read_file"));
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history)), 2);
    history.push(result("c1", "contents"));
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history)), 3);
    let parsed = s.parse(Dialect::OpenaiChat, SCOPE, &openai(&history)).unwrap();
    assert_eq!(
        parsed.transcript.messages[2].tool_results[0].name.as_deref(),
        Some("read_file")
    );
    assert_eq!(parsed.transcript.system, "sys");
    assert_eq!(s.usage().0, 1, "one conversation, one chain");
}

/// A request whose body repeats the last body's bytes up to its last
/// history item is split after them (in every dialect), and gives the full
/// parse; the same history spelled otherwise is scanned whole.
#[test]
fn a_body_repeating_the_last_ones_bytes_is_split_after_them() {
    let user = |t: &str| json!({"role": "user", "content": t});
    let part = |t: &str| json!({"role": "user", "parts": [{"text": t}]});
    let item = |t: &str| json!({"type": "message", "role": "user", "content": t});
    type Body = fn(&[Value]) -> Vec<u8>;
    type Turn<'a> = &'a dyn Fn(&str) -> Value;
    let cases: [(Dialect, Body, Turn<'_>); 4] = [
        (Dialect::OpenaiChat, openai, &user),
        (Dialect::Anthropic, anthropic, &user),
        (Dialect::Gemini, gemini, &part),
        (Dialect::OpenaiResponses, responses, &item),
    ];
    for (dialect, body, turn) in cases {
        let s = store();
        let mut history = vec![turn("one"), turn("two")];
        assert_eq!(check(&s, dialect, &body(&history)), 0);
        history.push(turn("three"));
        assert_eq!(check(&s, dialect, &body(&history)), 2, "{dialect:?}");
        assert_eq!(s.resumed(), 1, "{dialect:?}: split after the known bytes");
        assert_eq!(check(&s, dialect, &body(&history)), 3, "{dialect:?}: a retry");
        assert_eq!(s.resumed(), 2, "{dialect:?}");
        let pretty =
            serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&body(&history)).unwrap()).unwrap();
        check(&s, dialect, &pretty);
        assert_eq!(s.resumed(), 2, "{dialect:?}: other bytes, scanned whole");
    }
}

/// Many conversations sharing a long system prompt and differing only in
/// their last bytes, taking turns: each is split after its own last body's
/// bytes (told apart by those last bytes, among the 16 most recent sharing
/// the same step-aligned prefix), not only the few most recent.
#[test]
fn conversations_sharing_a_prompt_each_resume_after_their_own_bytes() {
    let s = store();
    let prompt = "You are a coding agent. ".repeat(20);
    let mut histories: Vec<Vec<Value>> = (0..10)
        .map(|n| {
            vec![
                json!({"role": "system", "content": prompt}),
                json!({"role": "user", "content": format!("task {n}")}),
            ]
        })
        .collect();
    for history in &histories {
        check(&s, Dialect::OpenaiChat, &openai(history));
    }
    for round in 0..3 {
        let before = s.resumed();
        for (n, history) in histories.iter_mut().enumerate() {
            let id = format!("c{n}_{round}");
            history.push(call(&id, "read_file"));
            history.push(result(&id, "contents"));
            check(&s, Dialect::OpenaiChat, &openai(history));
        }
        assert_eq!(
            s.resumed() - before,
            10,
            "round {round}: every conversation resumed"
        );
    }
}

/// A request that extends a kept chain shares the chain's turns (no copy),
/// and a request still holding the turns of an earlier one keeps them as
/// they were while the chain grows (the chain copies them first). Responses
/// parts join the last turn, so the growth is inside a turn too.
#[test]
fn a_request_shares_the_chain_turns_and_an_earlier_one_keeps_its_own() {
    let s = store();
    let user = json!({"type": "message", "role": "user", "content": "go"});
    let call =
        |id: &str| json!({"type": "function_call", "call_id": id, "name": "exec_command", "arguments": "{}"});
    let output = |id: &str| json!({"type": "function_call_output", "call_id": id, "output": "ok"});
    let mut history = vec![user, call("c1")];
    let first = s
        .parse(Dialect::OpenaiResponses, SCOPE, &responses(&history))
        .unwrap();
    history.extend([call("c2"), output("c1"), output("c2")]);
    let second = s
        .parse(Dialect::OpenaiResponses, SCOPE, &responses(&history))
        .unwrap();
    let first_alone = Dialect::OpenaiResponses
        .parse_request(&responses(&history[..2]))
        .unwrap();
    assert_eq!(first, first_alone, "the earlier request's turns did not change");
    assert_eq!(
        second.transcript.messages[1].tool_calls.len(),
        2,
        "c2 joined the turn of c1"
    );
    drop((first, second));
    history.push(
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}),
    );
    let third = s
        .parse(Dialect::OpenaiResponses, SCOPE, &responses(&history))
        .unwrap();
    assert_eq!(
        Arc::strong_count(&third.transcript.messages),
        2,
        "the request and the kept chain share one copy of the turns"
    );
    assert_eq!(
        check(&s, Dialect::OpenaiResponses, &responses(&history[..2])),
        2,
        "cut inside a turn"
    );
}

/// The turns of one kept chain carry one lineage while they only grow; a
/// request cut short of them gets turns of its own, under another.
#[test]
fn a_chain_turns_keep_their_lineage_while_they_grow() {
    let s = store();
    let mut history = vec![
        json!({"role": "user", "content": "go"}),
        call("c1", "read"),
        result("c1", "a"),
    ];
    let first = s.parse(Dialect::OpenaiChat, SCOPE, &openai(&history)).unwrap();
    history.extend([call("c2", "read"), result("c2", "b")]);
    let second = s.parse(Dialect::OpenaiChat, SCOPE, &openai(&history)).unwrap();
    let cut = s
        .parse(Dialect::OpenaiChat, SCOPE, &openai(&history[..2]))
        .unwrap();
    let alone = Dialect::OpenaiChat.parse_request(&openai(&history)).unwrap();
    assert!(first.transcript.lineage.is_some());
    assert!(
        first.transcript.lineage.same(second.transcript.lineage),
        "appended"
    );
    assert!(
        !cut.transcript.lineage.same(second.transcript.lineage),
        "cut short"
    );
    assert!(
        !alone.transcript.lineage.is_some(),
        "a full parse has no kept turns"
    );
}

/// A retry of the same body parses nothing again.
#[test]
fn a_retry_reuses_every_item() {
    let s = store();
    let history = vec![
        json!({"role": "user", "content": "go"}),
        call("c1", "ls"),
        result("c1", "x"),
    ];
    check(&s, Dialect::OpenaiChat, &openai(&history));
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history)), 3);
}

/// Conversations that share their system prompt (every session of one agent
/// at a shared gateway) keep a chain each: taking turns, each reuses its
/// whole history, and neither takes the other's chain.
#[test]
fn conversations_sharing_a_prompt_keep_their_own_chains() {
    let s = store();
    let conversation = |n: usize| {
        let mut history = vec![
            json!({"role": "system", "content": "You are a coding agent."}),
            json!({"role": "user", "content": format!("task {n}")}),
        ];
        for i in 0..4 {
            history.push(call(&format!("c{n}_{i}"), "read_file"));
            history.push(result(&format!("c{n}_{i}"), &format!("file {i} of task {n}")));
        }
        openai(&history)
    };
    let bodies: Vec<Vec<u8>> = (0..3).map(conversation).collect();
    for body in &bodies {
        check(&s, Dialect::OpenaiChat, body);
    }
    for round in 0..3 {
        for body in &bodies {
            assert_eq!(check(&s, Dialect::OpenaiChat, body), 10, "round {round}");
        }
    }
    assert_eq!(s.usage().0, 3, "one chain per conversation");
}

/// A request that adds more items than the end window looks back over (a
/// client that sends every few turns) still reuses its chain, found by its
/// prefix in the store's index.
#[test]
fn a_chain_further_back_than_the_end_window_is_still_reused() {
    let s = store();
    let mut history = vec![json!({"role": "user", "content": "go"})];
    check(&s, Dialect::OpenaiChat, &openai(&history));
    for i in 0..END_WINDOW {
        history.push(call(&format!("c{i}"), "ls"));
        history.push(result(&format!("c{i}"), "out"));
    }
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history)), 1);
    history.push(call("last", "ls"));
    assert_eq!(
        check(&s, Dialect::OpenaiChat, &openai(&history)),
        history.len() - 1
    );
}

/// A fork finds the longest prefix a kept chain shares with it even when the
/// newest chain holding that prefix has left the store (here: grown past the
/// store's budget) and only an older one still holds it.
#[test]
fn a_fork_finds_an_older_chain_when_the_newest_holder_left() {
    let s = ChainStore::with_limits(64 << 10, MAX_CHAINS, Duration::from_secs(3600));
    let head = [
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": "go"}),
        call("c1", "ls"),
    ];
    let with = |tail: &[Value]| openai(&[&head[..], tail].concat());
    let a = with(&[result("c1", "a"), call("c2", "ls"), result("c2", "a2")]);
    assert_eq!(check(&s, Dialect::OpenaiChat, &a), 0);
    // B forks from A after the call: the newest holder of the shared prefix.
    let b = [result("c1", "b")];
    assert_eq!(check(&s, Dialect::OpenaiChat, &with(&b)), 3);
    // B grows past the store's budget: taken, then not kept.
    let huge = [
        b[0].clone(),
        json!({"role": "user", "content": "x".repeat(100 << 10)}),
    ];
    assert_eq!(check(&s, Dialect::OpenaiChat, &with(&huge)), 4);
    assert_eq!(s.usage().0, 1, "only A is kept");
    assert_eq!(s.slots(), 1, "nothing is left of B, not even its hashes");
    // C forks from the same prefix: A still holds it.
    assert_eq!(check(&s, Dialect::OpenaiChat, &with(&[result("c1", "c")])), 3);
    // A itself continues with its whole chain.
    let a_next = with(&[
        result("c1", "a"),
        call("c2", "ls"),
        result("c2", "a2"),
        call("c3", "ls"),
    ]);
    assert_eq!(check(&s, Dialect::OpenaiChat, &a_next), 6);
}

/// The hashes of `body`'s history as the store chains them (the request's
/// own lookup, for tests that take a chain out by hand).
fn hashes_of(s: &ChainStore, body: &[u8]) -> Vec<u128> {
    let start = xxh3_128_with_seed(&[SCOPE, Dialect::OpenaiChat.name().as_bytes()].concat(), s.seed);
    let split = Dialect::OpenaiChat.split_request(body).unwrap().unwrap();
    chain_hashes(s.seed, start, &split.items)
}

/// A conversation's chain keeps its slot from turn to turn: its hashes stay
/// indexed while a request has it out, and putting it back indexes only the
/// hashes that request added.
#[test]
fn a_chain_keeps_its_slot_from_turn_to_turn() {
    let s = store();
    let mut history = vec![json!({"role": "user", "content": "go"})];
    check(&s, Dialect::OpenaiChat, &openai(&history));
    let ids = |s: &ChainStore| s.inner.lock().unwrap().chains.keys().copied().collect::<Vec<_>>();
    let first = ids(&s);
    let last_holder = |s: &ChainStore, hash: u128| s.inner.lock().unwrap().prefixes[&hash].last;
    let go = hashes_of(&s, &openai(&history))[0];
    for i in 0..5 {
        history.push(call(&format!("c{i}"), "ls"));
        history.push(result(&format!("c{i}"), "out"));
        assert_eq!(
            check(&s, Dialect::OpenaiChat, &openai(&history)),
            history.len() - 2
        );
        assert_eq!(ids(&s), first, "turn {i}: the same slot");
        assert_eq!(last_holder(&s, go), Some(first[0]), "turn {i}");
    }
    // Out with a request: still indexed, not kept.
    let taken = s.take_longest(&hashes_of(&s, &openai(&history))).unwrap();
    assert_eq!(taken.out.map(|out| out.id), Some(first[0]));
    assert_eq!((s.usage().0, s.slots()), (0, 1));
    s.assert_indexed();
    s.put_back(taken);
    assert_eq!((s.usage().0, s.slots()), (1, 1));
    s.assert_indexed();
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history)), history.len());
}

/// A second request of a conversation while the first has its chain out
/// (an agent's retry racing its original) parses in full, and both chains
/// go back; the conversation's next request reuses its whole history.
#[test]
fn a_request_racing_its_conversations_chain_parses_in_full() {
    let s = store();
    let history = vec![
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": "go"}),
        call("c1", "ls"),
        result("c1", "out"),
    ];
    let body = openai(&history);
    check(&s, Dialect::OpenaiChat, &body);
    let taken = s.take_longest(&hashes_of(&s, &body)).unwrap();
    // The store has only the chain out: nothing to reuse, even the system
    // prompt's item.
    assert_eq!(check(&s, Dialect::OpenaiChat, &body), 0);
    assert_eq!((s.usage().0, s.slots()), (1, 2));
    s.put_back(taken);
    s.assert_indexed();
    assert_eq!((s.usage().0, s.slots()), (2, 2), "both kept");
    let mut next = history.clone();
    next.push(call("c2", "ls"));
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&next)), 4);
}

/// A chain whose slot went while a request had it out (idle past the
/// sessions' idle TTL) is not kept when that request puts it back (its
/// slot held the hashes it was taken with); the conversation's next
/// request is parsed in full and kept again.
#[test]
fn a_chain_whose_slot_went_while_out_is_parsed_again() {
    let s = ChainStore::with_limits(BUDGET_BYTES, 1, Duration::ZERO);
    let a = openai(&[json!({"role": "user", "content": "a"})]);
    check(&s, Dialect::OpenaiChat, &a);
    let taken = s.take_longest(&hashes_of(&s, &a)).unwrap();
    std::thread::sleep(Duration::from_millis(2));
    check(
        &s,
        Dialect::OpenaiChat,
        &openai(&[json!({"role": "user", "content": "b"})]),
    );
    assert_eq!((s.usage().0, s.slots()), (1, 1), "the chain out went idle");
    std::thread::sleep(Duration::from_millis(2));
    s.put_back(taken);
    s.assert_indexed();
    assert_eq!(
        (s.usage().0, s.slots()),
        (0, 0),
        "the idle ones went, the chain put back without its slot is not kept"
    );
    assert_eq!(check(&s, Dialect::OpenaiChat, &a), 0, "parsed in full");
    assert_eq!(s.usage().0, 1, "and kept again");
    assert_eq!(check(&s, Dialect::OpenaiChat, &a), 1);
}

/// A long chain taken out leaves its hashes in its slot: the chain carries
/// none of them, only those its request adds, and putting it back makes
/// them one list again, indexed once.
#[test]
fn a_chain_out_carries_only_the_hashes_its_request_adds() {
    let s = ChainStore::new(Duration::from_secs(60));
    let mut history = vec![json!({"role": "user", "content": "go"})];
    for i in 0..20 {
        history.push(call(&format!("c{i}"), "ls"));
        history.push(result(&format!("c{i}"), "out"));
    }
    check(&s, Dialect::OpenaiChat, &openai(&history));
    let all = hashes_of(&s, &openai(&history));
    let taken = s.take_longest(&all).unwrap();
    assert!(taken.hashes.is_empty(), "no hash copied out");
    assert_eq!(
        taken.out.map(|out| (out.len, out.last)),
        Some((all.len(), all.last().copied()))
    );
    assert_eq!(taken.last_hash(), all.last().copied());
    s.put_back(taken);
    s.assert_indexed();
    history.push(call("c20", "ls"));
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history)), all.len());
    let expected = hashes_of(&s, &openai(&history));
    let inner = s.inner.lock().unwrap();
    let kept: Vec<&Vec<u128>> = inner.chains.values().map(|slot| &slot.chain.hashes).collect();
    assert_eq!(kept, vec![&expected], "one list: the slot's and the added ones");
}

/// An edited earlier message, a truncated history (compaction, a rerun of
/// the same task) and a fork reuse the prefix before the first difference.
#[test]
fn edits_and_truncations_reuse_the_common_prefix() {
    let s = store();
    let mut history = vec![
        json!({"role": "system", "content": "sys"}),
        json!({"role": "user", "content": "go"}),
    ];
    for i in 0..5 {
        history.push(call(&format!("c{i}"), "ls"));
        history.push(result(&format!("c{i}"), "out"));
    }
    check(&s, Dialect::OpenaiChat, &openai(&history));
    history[5] = result("c1", "[pruned]");
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history)), 5);
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history[..2])), 2);
    // Only the system message is shared: it stays system text, not a message.
    let rerun = [history[0].clone(), json!({"role": "user", "content": "again"})];
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&rerun)), 1);
    assert_eq!(check(&s, Dialect::OpenaiChat, &openai(&history[..1])), 1);
}

/// Gemini contents are reused the same way.
#[test]
fn gemini_contents_are_reused() {
    let s = store();
    let mut contents =
        vec![json!({"role": "user", "parts": [{"text": "<session_context>"}, {"text": "go"}]})];
    check(&s, Dialect::Gemini, &gemini(&contents));
    contents
        .push(json!({"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"path": "."}}}]}));
    contents.push(
        json!({"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"error": "no"}}}]}),
    );
    assert_eq!(check(&s, Dialect::Gemini, &gemini(&contents)), 1);
    assert_eq!(check(&s, Dialect::Gemini, &gemini(&contents)), 3);
}

/// Bodies that do not split get the full parse and its error; different
/// scopes and dialects never share a chain.
/// Anthropic messages are reused too, and a tool result in the new part
/// takes its tool name from a call in the reused part.
#[test]
fn anthropic_messages_are_reused_and_names_resolve_across_the_split() {
    let s = store();
    let mut history = vec![
        json!({"role": "user", "content": "list files"}),
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}),
    ];
    assert_eq!(check(&s, Dialect::Anthropic, &anthropic(&history)), 0);
    history.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}, {"type": "text", "text": "go on"}]}));
    assert_eq!(check(&s, Dialect::Anthropic, &anthropic(&history)), 2);
    let (parsed, _) = s
        .parse_reusing(Dialect::Anthropic, SCOPE, &anthropic(&history))
        .unwrap();
    let result = &parsed.transcript.messages[2].tool_results[0];
    assert_eq!(result.name.as_deref(), Some("Bash"));
    assert_eq!(
        parsed.transcript.messages.len(),
        4,
        "the last message is a tool turn and a user turn"
    );
}

#[test]
fn unusual_bodies_and_other_scopes_get_the_full_parse() {
    let s = store();
    for body in [
        &b"{"[..],
        b"[]",
        b"{\"messages\": {}}",
        b"{\"model\": \"m\"}",
        b"{\"messages\": [1], \"messages\": null}",
    ] {
        assert!(s.parse(Dialect::OpenaiChat, SCOPE, body).is_err());
    }
    // Null first, array last: the full parse takes the last one.
    assert_eq!(
        check(
            &s,
            Dialect::OpenaiChat,
            b"{\"messages\": null, \"messages\": [1]}"
        ),
        0
    );
    let history = [json!({"role": "user", "content": "go"})];
    check(&s, Dialect::OpenaiChat, &openai(&history));
    let other = s
        .parse_reusing(Dialect::OpenaiChat, b"other tenant", &openai(&history))
        .unwrap();
    assert_eq!(other.1, 0);
}

/// The store stays within its budget and chain count; an idle chain goes.
#[test]
fn the_store_is_bounded() {
    let s = ChainStore::with_limits(4 * (ITEM_OVERHEAD + 64), 2, Duration::from_secs(3600));
    for i in 0..5 {
        check(
            &s,
            Dialect::OpenaiChat,
            &openai(&[json!({"role": "user", "content": format!("task {i}")})]),
        );
        assert!(
            s.usage().0 <= 2 && s.usage().1 <= 4 * (ITEM_OVERHEAD + 64),
            "{:?}",
            s.usage()
        );
    }
    let big: Vec<Value> = (0..10)
        .map(|i| json!({"role": "user", "content": format!("{i}")}))
        .collect();
    check(&s, Dialect::OpenaiChat, &openai(&big));
    assert_eq!(
        check(&s, Dialect::OpenaiChat, &openai(&big)),
        0,
        "larger than the budget: not kept"
    );

    let s = ChainStore::with_limits(BUDGET_BYTES, MAX_CHAINS, Duration::ZERO);
    check(
        &s,
        Dialect::OpenaiChat,
        &openai(&[json!({"role": "user", "content": "a"})]),
    );
    std::thread::sleep(Duration::from_millis(2));
    check(
        &s,
        Dialect::OpenaiChat,
        &openai(&[json!({"role": "user", "content": "b"})]),
    );
    assert_eq!(s.usage().0, 1, "the idle chain was dropped");
}

/// More conversations taking turns than the store holds: a least recently
/// used cache would evict each before its next request and reuse nothing;
/// the admission test keeps the ones it has, and they are reused every turn.
#[test]
fn conversations_taking_turns_past_the_limit_keep_those_kept() {
    let s = ChainStore::with_limits(BUDGET_BYTES, 2, Duration::from_secs(3600));
    let conversation = |n: usize| {
        let mut history = vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": format!("task {n}")}),
        ];
        history.push(call(&format!("c{n}"), "ls"));
        history.push(result(&format!("c{n}"), "out"));
        openai(&history)
    };
    let bodies: Vec<Vec<u8>> = (0..4).map(conversation).collect();
    for body in &bodies {
        check(&s, Dialect::OpenaiChat, body);
    }
    for round in 0..5 {
        let reused: Vec<usize> = bodies.iter().map(|b| check(&s, Dialect::OpenaiChat, b)).collect();
        assert_eq!(
            reused,
            [4, 4, 1, 1],
            "round {round}: the first two kept, the others share the system prompt"
        );
    }
    // A conversation seen more often than a kept one takes its place.
    for _ in 0..8 {
        check(&s, Dialect::OpenaiChat, &bodies[3]);
    }
    assert_eq!(
        check(&s, Dialect::OpenaiChat, &bodies[3]),
        4,
        "kept once seen more often"
    );
}

/// An item weighs what it holds parsed, not its raw bytes: a function
/// response of 2,500 small numbers is ~5 KB of text but ~80 KB parsed.
#[test]
fn items_weigh_their_parsed_size() {
    let s = store();
    let numbers: Vec<u32> = (0..2_500).map(|i| i % 10).collect();
    let contents = vec![
        json!({"role": "user", "parts": [{"text": "go"}]}),
        json!({"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"a": numbers}}}]}),
    ];
    let body = gemini(&contents);
    check(&s, Dialect::Gemini, &body);
    let (_, bytes) = s.usage();
    assert!(
        bytes >= 2_500 * 32,
        "weighed {bytes} bytes for a {}-byte body",
        body.len()
    );
}

#[test]
fn common_prefix_finds_the_first_difference() {
    assert_eq!(common_prefix(&[], &[1]), 0);
    assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 3]), 3);
    assert_eq!(common_prefix(&[1, 2, 3], &[1, 2]), 2);
    assert_eq!(common_prefix(&[1, 2, 3, 4, 5], &[1, 2, 9, 9, 9, 9]), 2);
    assert_eq!(common_prefix(&[1], &[2]), 0);
}

/// One OpenAI message from a small pool, so that ids repeat and resolve
/// (or not) across the reused and the new part.
fn openai_message() -> impl Strategy<Value = Value> + Clone {
    let id = (0..4_u8).prop_map(|i| format!("c{i}"));
    let name = prop::sample::select(vec!["ls", "read_file", ""]);
    let text = prop::sample::select(vec!["", "a", "b\nc", "ok \"q\""]);
    prop_oneof![
        text.clone().prop_map(|t| json!({"role": "system", "content": t})),
        text.clone().prop_map(|t| json!({"role": "developer", "content": [{"type": "text", "text": t}]})),
        text.clone().prop_map(|t| json!({"role": "user", "content": t})),
        text.clone().prop_map(|t| json!({"role": "user", "content": [{"type": "image_url"}, {"type": "text", "text": t}, t]})),
        (id.clone(), name.clone()).prop_map(|(id, name)| call(&id, name)),
        (id.clone(), name.clone(), id.clone()).prop_map(|(a, name, b)| json!({"role": "assistant", "content": "t",
            "tool_calls": [{"id": a, "function": {"name": name, "arguments": {"x": 1}}}, {"id": b, "function": {"name": "x", "arguments": "not json"}}, {"id": ""}]})),
        name.clone().prop_map(|name| json!({"role": "assistant", "function_call": {"name": name, "arguments": ""}})),
        (id.clone(), text.clone()).prop_map(|(id, t)| result(&id, t)),
        (id, name.clone()).prop_map(|(id, name)| json!({"role": "tool", "tool_call_id": id, "name": name, "content": null})),
        name.prop_map(|name| json!({"role": "function", "name": name, "content": "r"})),
        text.prop_map(|t| json!({"role": "critic", "content": t})),
        Just(json!(1)),
        Just(json!("loose")),
        Just(json!({})),
    ]
}

fn gemini_content() -> impl Strategy<Value = Value> + Clone {
    let text = prop::sample::select(vec!["", "a", "b\nc"]);
    prop_oneof![
        text.clone().prop_map(|t| json!({"role": "user", "parts": [{"text": t}]})),
        text.clone().prop_map(|t| json!({"role": "model", "parts": [{"text": t, "thought": true}, {"text": "said"}]})),
        text.clone().prop_map(|t| json!({"role": "model", "parts": [{"text": t}, {"functionCall": {"id": "i", "name": "ls", "args": {"p": t}}}]})),
        Just(json!({"role": "model", "parts": [{"function_call": {"name": "ls"}}]})),
        text.clone().prop_map(|t| json!({"role": "user", "parts": [{"functionResponse": {"name": "ls", "response": {"output": t}}}]})),
        Just(json!({"role": "user", "parts": [{"function_response": {"id": "i", "name": "ls", "response": {"error": "x"}}}, {"text": "also"}]})),
        text.prop_map(|t| json!({"role": "function", "parts": [{"functionResponse": {"name": "ls", "response": t}}]})),
        Just(json!({"parts": []})),
        Just(json!(null)),
    ]
}

fn anthropic_message() -> impl Strategy<Value = Value> + Clone {
    let text = prop::sample::select(vec!["", "a", "<system-reminder>x</system-reminder>"]);
    let id = prop::sample::select(vec!["t1", "t2"]);
    prop_oneof![
        text.clone().prop_map(|t| json!({"role": "user", "content": t})),
        (text.clone(), id.clone()).prop_map(|(t, id)| json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "text", "text": t},
            {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": t}}]})),
        (text.clone(), id.clone()).prop_map(|(t, id)| json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": t, "is_error": t.is_empty()},
            {"type": "text", "text": t}]})),
        id.prop_map(|id| json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": "out"}]}]})),
        text.prop_map(|t| json!({"role": "system", "content": t})),
        Just(json!({"role": "assistant", "content": []})),
        Just(json!(null)),
    ]
}

fn responses_item() -> impl Strategy<Value = Value> + Clone {
    let text = prop::sample::select(vec!["", "a", "b\nc"]);
    let id = prop::sample::select(vec!["c1", "c2"]);
    prop_oneof![
        text.clone().prop_map(|t| json!({"role": "user", "content": t})),
        text.clone().prop_map(|t| json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": t}]})),
        text.clone().prop_map(|t| json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]})),
        (text.clone(), id.clone()).prop_map(|(t, id)| json!({"type": "function_call", "call_id": id, "name": "exec_command", "arguments": format!("{{\"cmd\":\"{t}\"}}")})),
        (text.clone(), id.clone()).prop_map(|(t, id)| json!({"type": "function_call_output", "call_id": id, "output": t})),
        id.prop_map(|id| json!({"type": "custom_tool_call_output", "call_id": id, "output": [{"type": "input_text", "text": "x"}]})),
        Just(json!({"type": "reasoning", "summary": [], "encrypted_content": "opaque"})),
        Just(json!({"type": "compaction", "encrypted_content": "opaque"})),
        Just(json!({"type": "compaction_trigger"})),
        text.prop_map(|t| json!({"type": "local_shell_call", "call_id": "c3", "action": {"command": [t]}})),
        Just(json!(null)),
    ]
}

/// What happens to the history between two requests.
#[derive(Debug, Clone)]
enum Step {
    Append(Vec<Value>),
    Retry,
    Truncate(prop::sample::Index),
    Edit(prop::sample::Index, Value),
    /// Another conversation in the same store: a fork of this one's start.
    Fork(prop::sample::Index, Vec<Value>),
    /// The same history sent with other whitespace (no item matches).
    Pretty,
}

fn steps(item: impl Strategy<Value = Value> + Clone) -> impl Strategy<Value = Vec<Step>> {
    let items = prop::collection::vec(item.clone(), 1..4);
    let step = prop_oneof![
        4 => items.clone().prop_map(Step::Append),
        1 => Just(Step::Retry),
        1 => any::<prop::sample::Index>().prop_map(Step::Truncate),
        1 => (any::<prop::sample::Index>(), item).prop_map(|(i, v)| Step::Edit(i, v)),
        1 => (any::<prop::sample::Index>(), items).prop_map(|(i, v)| Step::Fork(i, v)),
        1 => Just(Step::Pretty),
    ];
    prop::collection::vec(step, 1..12)
}

/// Runs `steps` from `start`, checking every request against the full parse.
fn run(dialect: Dialect, start: Vec<Value>, steps: Vec<Step>, body: fn(&[Value]) -> Vec<u8>) {
    let s = store();
    let mut history = start;
    check(&s, dialect, &body(&history));
    for step in steps {
        let sent = match step {
            Step::Append(items) => {
                history.extend(items);
                body(&history)
            }
            Step::Retry => body(&history),
            Step::Truncate(i) => {
                history.truncate(i.index(history.len() + 1));
                body(&history)
            }
            Step::Edit(i, v) if !history.is_empty() => {
                let at = i.index(history.len());
                history[at] = v;
                body(&history)
            }
            Step::Edit(_, v) => {
                history.push(v);
                body(&history)
            }
            Step::Fork(i, items) => {
                let mut fork = history[..i.index(history.len() + 1)].to_vec();
                fork.extend(items);
                body(&fork)
            }
            Step::Pretty => {
                let value: Value = serde_json::from_slice(&body(&history)).unwrap();
                serde_json::to_vec_pretty(&value).unwrap()
            }
        };
        check(&s, dialect, &sent);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the history goes through, the chain parse gives the full parse's request (OpenAI chat).
    #[test]
    fn openai_chain_parse_is_the_full_parse(
        start in prop::collection::vec(openai_message(), 0..6),
        steps in steps(openai_message()),
    ) {
        run(Dialect::OpenaiChat, start, steps, openai);
    }

    /// Whatever the history goes through, the chain parse gives the full parse's request (Anthropic).
    #[test]
    fn anthropic_chain_parse_is_the_full_parse(
        start in prop::collection::vec(anthropic_message(), 0..6),
        steps in steps(anthropic_message()),
    ) {
        run(Dialect::Anthropic, start, steps, anthropic);
    }

    /// Whatever the history goes through, the chain parse gives the full parse's request (OpenAI Responses).
    #[test]
    fn responses_chain_parse_is_the_full_parse(
        start in prop::collection::vec(responses_item(), 0..6),
        steps in steps(responses_item()),
    ) {
        run(Dialect::OpenaiResponses, start, steps, responses);
    }

    /// Whatever the history goes through, the chain parse gives the full parse's request (Gemini).
    #[test]
    fn gemini_chain_parse_is_the_full_parse(
        start in prop::collection::vec(gemini_content(), 0..6),
        steps in steps(gemini_content()),
    ) {
        run(Dialect::Gemini, start, steps, gemini);
    }
}
