"""Request bodies for the end-to-end benches (benches/e2e.sh,
benches/instructions.sh, benches/segments.sh): one OpenAI chat body per
line, each its own conversation (a distinct first user message, so a
distinct fingerprinted session), ending in one tool result; with SIZE > 0,
about SIZE bytes of distinct earlier tool cycles.

    python3 benches/bodies.py SIZE COUNT FILE [SHAPE]
    python3 benches/bodies.py cycles C COUNT BEFORE AFTER [SHAPE]

The `cycles` form (benches/instructions.sh's CYCLES, issue #37's growth
curve) writes COUNT conversations twice: to BEFORE with C short tool cycles
each, to AFTER the same conversations with one cycle more (the turn that
follows), so that a run that sends BEFORE first and counts AFTER counts
requests that add one tool cycle to a conversation of C cycles.

SHAPE `calls` (the default): each cycle an assistant tool call and its
`tool` result. SHAPE `text`: each cycle shaped as a text-protocol agent's
(Cline's): the call in the assistant's text, its result a user message in
the agent's wrappers. SHAPE `agent`: as `calls`, with what a real coding
agent sends on every request of every conversation: a 20 KB system prompt
and 40 tool definitions of about 1 KB each (Claude Code's and Codex's are
of that order).
"""

import json
import sys



# SHAPE agent: one agent's system prompt and tool list, the same on every request.
agent_system = "You are a coding agent. Follow the repository's conventions; run the tests before you finish.\n" * 220
agent_tools = [{"type": "function", "function": {
    "name": f"tool_{t}", "description": f"Tool {t}: " + "reads or changes the workspace as its parameters say. " * 14,
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "A path relative to the workspace root."},
        "content": {"type": "string", "description": "The text to write, whole."}},
        "required": ["path"]}}} for t in range(40)]


def cycles_bodies(cycles, count, before, after, shape="calls"):
    def body(messages):
        out = {"model": "m", "messages": messages}
        if shape == "agent":
            out["tools"] = agent_tools
        return json.dumps(out, separators=(",", ":")) + "\n"
    with open(before, "w") as out_before, open(after, "w") as out_after:
        for n in range(count):
            system = agent_system if shape == "agent" else "You are a coding agent."
            messages = [{"role": "system", "content": system},
                        {"role": "user", "content": f"Task {n}: tidy the parser module."}]
            for i in range(cycles + 1):
                if i == cycles:
                    out_before.write(body(messages))
                messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}_{i}", "type": "function",
                              "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/f{i}.rs"})}}]},
                             {"role": "tool", "tool_call_id": f"c{n}_{i}", "content": f"a{i}.txt\nb{i}.txt"}]
            out_after.write(body(messages))

if sys.argv[1] == "cycles":
    cycles_bodies(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], *sys.argv[6:7])
    sys.exit(0)
size, count, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
shape = sys.argv[4] if len(sys.argv) > 4 else "calls"
code = "fn f() { let x = \"a\\nb\"; if a < b { g::<T>(x) } }\n" * 14
with open(path, "w") as out:
    for n in range(count):
        system = agent_system if shape == "agent" else "You are a coding agent."
        messages = [{"role": "system", "content": system},
                    {"role": "user", "content": f"Task {n}: tidy the parser module."}]
        i = total = 0
        while True:
            if shape == "text":
                result = (f"[read_file for 'src/f{i}.rs'] Result:\n<file_content path=\"src/f{i}.rs\">\n"
                          f"// file {i} of task {n}\n{code}</file_content>\n\n"
                          "<environment_details>\n# VSCode Visible Files\nsrc/main.rs\n</environment_details>")
                messages += [{"role": "assistant", "content": f"Reading it.\n<read_file>\n<path>src/f{i}.rs</path>\n</read_file>"},
                             {"role": "user", "content": result}]
            else:
                result = (f"// file {i} of task {n}\n" + ("fn f() { let x = \"a\\nb\"; }\n" * 30)[:760]) if size else "a.txt\nb.txt"
                messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{n}_{i}", "type": "function",
                              "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/f{i}.rs"})}}]},
                             {"role": "tool", "tool_call_id": f"c{n}_{i}", "content": result}]
            total += len(result) + 200
            i += 1
            if total >= size:
                break
        body = {"model": "m", "messages": messages}
        if shape == "agent":
            body["tools"] = agent_tools
        out.write(json.dumps(body, separators=(",", ":")) + "\n")
