#!/usr/bin/env python3
"""grammar_check.py — reference verdicts for the structured-output tests (tests/test_*.c).

Reads JSON lines on stdin and writes one JSON line per input line on stdout:
  {"schema": S, "docs": [text, ...]}  ->  {"ok": [bool, ...], "why": [str, ...]}
      each text must parse as JSON (json.loads) and validate against S with Python's
      jsonschema (draft 2020-12, formats asserted; time and date-time checked here since
      jsonschema needs an extra package for them)
  {"re": pattern, "strings": [text, ...]}  ->  {"ok": [bool, ...]}
      re.fullmatch(pattern, text)
Exit status 3 when jsonschema is missing (the C test then skips with a message).
"""
import datetime
import json
import re
import sys

try:
    import jsonschema
except ImportError:
    sys.exit(3)

FC = jsonschema.FormatChecker()
TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$")


@FC.checks("time")
def is_time(s):
    return not isinstance(s, str) or TIME.match(s) is not None


@FC.checks("date-time")
def is_date_time(s):
    if not isinstance(s, str):
        return True
    date, sep, time = s.partition("T")
    if not sep or not TIME.match(time):
        return False
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        return False
    return True


def check_docs(schema, docs):
    v = jsonschema.Draft202012Validator(schema, format_checker=FC)
    ok, why = [], []
    for d in docs:
        try:
            inst = json.loads(d)
        except ValueError as e:
            ok.append(False)
            why.append("not JSON: %s" % e)
            continue
        errs = list(v.iter_errors(inst))
        ok.append(not errs)
        why.append("; ".join(e.message for e in errs[:2]))
    return {"ok": ok, "why": why}


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        q = json.loads(line)
        if "re" in q:
            r = re.compile(q["re"])
            out = {"ok": [r.fullmatch(s) is not None for s in q["strings"]]}
        else:
            out = check_docs(q["schema"], q["docs"])
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
