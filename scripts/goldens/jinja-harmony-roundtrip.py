#!/usr/bin/env python3
"""gpt-oss's chat template (../shared/fixtures/chat/gpt-oss/template.jinja) rendered by Python
Jinja2 in transformers' environment (../shared/tools/fixtures/chat/render.py) for conversations
that send tool calls and their results back, as transformers passes them (the call's arguments as
an object, the reasoning in "thinking", no content beside tool_calls), written next to the same
conversations as an OpenAI client sends them (arguments as a JSON text, "reasoning_content",
"content": null). tests/server/test_sv_request.c renders the client's form through the server's
rewrite (sv_harmony_messages) and caldrix's template engine and compares. The template writes
today's date ("Current date: YYYY-MM-DD"); the test compares with that line's date masked.

Run: python3 scripts/goldens/jinja-harmony-roundtrip.py  (the pyenv python3 with jinja2 3.1.6; writes
tests/golden/harmony-roundtrip.json)
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, os.path.join(root, "..", "shared", "tools", "fixtures", "chat"))
import render  # noqa: E402

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                   "required": ["city"]}}}]

ARGS = {"city": "Paris"}


def call(as_text):
    return {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(ARGS) if as_text else ARGS}}


def conversation(openai):
    """openai: the client's form; else transformers'."""
    asst = {"role": "assistant", "tool_calls": [call(openai)]}
    if openai:
        asst.update({"content": None, "reasoning_content": "Need the weather tool."})
    else:
        asst["thinking"] = "Need the weather tool."
    first = [{"role": "user", "content": "What is the weather in Paris?"}, asst,
             {"role": "tool", "tool_call_id": "call_1", "content": "22C, sunny"}]
    final = {"role": "assistant", "content": "It is 22C and sunny in Paris."}
    if openai:
        final["reasoning_content"] = "The tool says 22C."
    else:
        final["thinking"] = "The tool says 22C."
    return {"after_the_result": first,
            "a_later_turn": first + [final, {"role": "user", "content": "And tomorrow?"}]}


def main():
    with open(os.path.join(root, "..", "shared", "fixtures", "chat", "gpt-oss", "template.jinja"), encoding="utf-8") as f:
        tpl = render.compile_template(f.read())
    hf, oa = conversation(False), conversation(True)
    extra = {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>", "tools": TOOLS}
    cases = []
    for name in hf:
        cases.append({"name": name, "openai_messages": oa[name], "hf_messages": hf[name], "extra": extra,
                      "add_generation_prompt": True,
                      "rendered": render.render(tpl, hf[name], True, extra)})
    out = os.path.join(root, "tests", "golden", "harmony-roundtrip.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"reference": "Python Jinja2 %s, ../shared/tools/fixtures/chat/render.py" % render.jinja2.__version__,
                   "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(out, len(cases), "cases")


if __name__ == "__main__":
    main()
