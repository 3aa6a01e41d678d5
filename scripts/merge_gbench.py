#!/usr/bin/python3
"""Merges Google Benchmark JSON files of one suite (nightly.sh runs every benchmark of a suite in
its own process, so that one that dies does not take its siblings with it) into one file.

    merge_gbench.py OUT.json PART.json [PART.json ...]

The context comes from the first readable part; the benchmark entries are concatenated in
order. Unreadable parts are named on stderr and skipped (exit 1 if none could be read).
"""
from __future__ import annotations

import json
import sys


def merge(parts):
    context, benchmarks, errors = None, [], []
    for p in parts:
        try:
            with open(p, encoding="utf-8") as fh:
                doc = json.load(fh)
            entries = doc["benchmarks"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            errors.append(f"{p}: not a Google Benchmark JSON file: {exc}")
            continue
        if context is None:
            context = doc.get("context", {})
        benchmarks += entries
    return {"context": context or {}, "benchmarks": benchmarks}, errors


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    doc, errors = merge(argv[1:])
    for e in errors:
        print(f"merge_gbench: {e}", file=sys.stderr)
    if len(errors) == len(argv) - 1:
        return 1
    with open(argv[0], "w") as fh:
        json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
