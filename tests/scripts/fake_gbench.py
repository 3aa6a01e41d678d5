"""Stands in for a Google Benchmark executable in the nightly.sh tests: answers
--benchmark_list_tests and --benchmark_filter from a fixture JSON file and writes the matching
entries to --benchmark_out.

    fake_gbench.py FIXTURE.json [Google Benchmark flags]

FAKE_ABORT=<regex>: a benchmark whose name matches aborts (SIGABRT, as an uncaught
std::bad_alloc does). FAKE_ALLOC_MB=<n>: every benchmark first allocates n MB (for the memory
cap test; under the cap that ends in MemoryError).
"""
import json
import os
import re
import signal
import sys


def main():
    fixture, args = sys.argv[1], sys.argv[2:]
    flags = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "true")
                 for a in args if a.startswith("--"))
    print("fake bench " + " ".join(args), file=sys.stderr)
    with open(fixture) as fh:
        doc = json.load(fh)
    pattern = re.compile(flags.get("benchmark_filter", "."))
    names = []
    for b in doc["benchmarks"]:
        name = b.get("run_name", b["name"])
        if name not in names and pattern.search(name):
            names.append(name)
    if flags.get("benchmark_list_tests") == "true":
        print("\n".join(names))
        return 0
    if os.environ.get("FAKE_ALLOC_MB"):
        block = bytearray(int(os.environ["FAKE_ALLOC_MB"]) << 20)
        block[-1] = 1
    abort = os.environ.get("FAKE_ABORT")
    if abort and any(re.search(abort, n) for n in names):
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGABRT)
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b.get("run_name", b["name"]) in names]
    with open(flags["benchmark_out"], "w") as fh:
        json.dump(doc, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
