#!/usr/bin/env python3
"""Independent check of constrained outputs (tests/text/test_grammar_corpus): each line of the JSONL
file holds {name, schema, text, finish}; the text must be a complete generation (finish "stop")
that parses as JSON and validates under the schema (python3-jsonschema, Draft 2020-12, with its
format checker for date, time, date-time, uuid, email). Prints failures and "valid N of M"."""
import json
import sys

from jsonschema import Draft202012Validator

lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
ok = 0
for r in lines:
    why = None
    if r["finish"] != "stop":
        why = "finish %s %s" % (r["finish"], r.get("message", ""))
    else:
        try:
            v = json.loads(r["text"])
            v = Draft202012Validator(r["schema"], format_checker=Draft202012Validator.FORMAT_CHECKER)
            errs = sorted(v.iter_errors(json.loads(r["text"])), key=lambda e: e.path)
            if errs:
                why = "invalid: " + errs[0].message
        except json.JSONDecodeError as e:
            why = "not JSON: %s" % e
    if why:
        print("FAIL %s: %s\n    text: %r" % (r["name"], why, r["text"][:300]))
    else:
        ok += 1
print("valid %d of %d" % (ok, len(lines)))
sys.exit(0 if ok == len(lines) else 1)
