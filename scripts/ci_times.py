#!/usr/bin/python3
"""Per-group test times of one ctest run, so that drift in CI time is visible.

  ci_times.py BUILD_DIR JUNIT_XML [--title TEXT]

A group is a test's first ctest label (tests/CMakeLists.txt labels every GoogleTest case with its
executable, the fuzz replays with "fuzz"), or the test's own name when it has none (the
harness_cli.* and scripts_pytest groups). Prints one row per group, slowest first: tests, failed,
seconds (the sum of the tests' own times; with ctest -j the wall time is less).
"""
import argparse
import json
import subprocess
import sys
import xml.etree.ElementTree as ET


def labels_by_test(build_dir: str) -> dict[str, str]:
    out = subprocess.run(["ctest", "--test-dir", build_dir, "--show-only=json-v1"],
                         capture_output=True, text=True, check=True).stdout
    groups = {}
    for t in json.loads(out).get("tests", []):
        labels = []
        for p in t.get("properties", []):
            if p.get("name") == "LABELS":
                labels = p.get("value") or []
        groups[t["name"]] = labels[0] if labels else t["name"]
    return groups


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir")
    ap.add_argument("junit")
    ap.add_argument("--title", default="ctest")
    args = ap.parse_args()
    try:
        group_of = labels_by_test(args.build_dir)
        root = ET.parse(args.junit).getroot()
    except (OSError, ET.ParseError, subprocess.CalledProcessError, json.JSONDecodeError) as e:
        print(f"ci_times: no timing table for {args.title}: {e}", file=sys.stderr)
        return 1
    rows: dict[str, list] = {}
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        g = group_of.get(name, name)
        row = rows.setdefault(g, [0, 0, 0.0])
        row[0] += 1
        if case.find("failure") is not None or case.get("status") == "fail":
            row[1] += 1
        row[2] += float(case.get("time") or 0)
    width = max([len(g) for g in rows] + [5])
    print(f"\n{args.title}: time per test group (slowest first)")
    print(f"  {'group':<{width}} {'tests':>6} {'failed':>6} {'seconds':>9}")
    for g, (n, failed, secs) in sorted(rows.items(), key=lambda kv: -kv[1][2]):
        print(f"  {g:<{width}} {n:>6} {failed:>6} {secs:>9.1f}")
    total = sum(r[2] for r in rows.values())
    print(f"  {'total':<{width}} {sum(r[0] for r in rows.values()):>6} "
          f"{sum(r[1] for r in rows.values()):>6} {total:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
