#!/usr/bin/python3
"""Fuzzes the MLLOG reader the result checks use (scripts/mlperf_results.py): parse_mllog_lines,
analyse_run and score_runs must turn any log into records, issues and a score, never an
exception. The reader is Python, so this is a mutation fuzzer of its own (no coverage feedback):
byte flips, cut/duplicated/swapped lines, and MLLOG records whose fields get odd JSON values
(huge integers, 1e400, NaN, nested objects, strings, null).

  fuzz_mllog.py --seconds 30 [--out DIR] SEED_DIR...   # fuzz; a failing input goes to DIR
  fuzz_mllog.py --replay DIR_OR_FILE...                # run inputs once (ctest)

Prints the executions run; exit 1 on the first input that raises (it is saved with its trace).
"""
import argparse
import json
import os
import pathlib
import random
import sys
import time
import traceback

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "scripts"))
import mlperf_results as mr  # noqa: E402

ODD_VALUES = [None, True, 0, -1, 10**400, -10**30, 1e308, "1e400", float("nan"), float("inf"),
              "", "x" * 50, [], [1, 2], {}, {"success": "maybe"}, {"status": 7}, 0.5, 2**63]
KEYS = ["run_start", "run_stop", "eval_accuracy", "submission_benchmark", "global_batch_size",
        "quality_target", "train_samples", "modeled_time_to_train_ms", "submission_division",
        "epoch_start", "init_stop"]


def check(data: bytes, name: str = "result_0.txt") -> None:
    lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
    records, issues = mr.parse_mllog_lines(lines, name)
    runs = []
    for bench in (None, "resnet", "bert"):
        run = mr.analyse_run(records, name, benchmark=bench, issues=issues)
        run.as_row()
        run.failure_reason()
        runs.append(run)
    for bench in ("resnet", "bert"):
        mr.score_runs(runs * 2, bench)
        mr.score_runs(runs[:1], bench)


def odd(rng: random.Random):
    return rng.choice(ODD_VALUES)


def mutate_record(obj, rng: random.Random):
    field = rng.choice(["key", "value", "time_ms", "metadata", "event_type", "namespace", "drop"])
    if field == "drop" and obj:
        obj.pop(rng.choice(list(obj)))
    elif field == "key":
        obj["key"] = rng.choice(KEYS + [odd(rng)])
    elif field == "metadata":
        md = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        md[rng.choice(["status", "epoch_num", "file", "lineno"])] = odd(rng)
        obj["metadata"] = rng.choice([md, odd(rng)])
    else:
        obj[field] = odd(rng)
    return obj


def mutate(data: bytes, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        i = rng.randrange(len(lines))
        if op == 0 and b":::MLLOG " in lines[i]:  # structure-aware: a field gets an odd value
            head, _, payload = lines[i].partition(b":::MLLOG ")
            try:
                obj = json.loads(payload)
                if isinstance(obj, dict):
                    payload = json.dumps(mutate_record(obj, rng)).encode()
            except ValueError:
                pass
            lines[i] = head + b":::MLLOG " + payload
        elif op == 1 and len(lines) > 1:
            del lines[i]
        elif op == 2:
            lines.insert(rng.randrange(len(lines) + 1), lines[i])
        elif op == 3:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 4 and lines[i]:
            b = bytearray(lines[i])
            b[rng.randrange(len(b))] = rng.randrange(256)
            lines[i] = bytes(b)
        else:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    return b"\n".join(lines)


def inputs(paths):
    for p in paths:
        p = pathlib.Path(p)
        files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
        for f in files:
            if not f.name.startswith("."):
                yield f


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--replay", action="store_true")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", time.time())))
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    files = list(inputs(args.paths))
    if not files:
        print("fuzz_mllog: no inputs", file=sys.stderr)
        return 2
    if args.replay:
        for f in files:
            check(f.read_bytes())
        print(f"fuzz_mllog: {len(files)} inputs replayed without an exception")
        return 0
    rng = random.Random(args.seed)
    seeds = [f.read_bytes() for f in files]
    execs = 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        data = rng.choice(seeds)
        for _ in range(rng.randint(1, 3)):
            data = mutate(data, rng)
        try:
            check(data)
        except Exception:  # noqa: BLE001 - any exception is a finding
            os.makedirs(args.out, exist_ok=True)
            path = os.path.join(args.out, f"crash-mllog-{args.seed}-{execs}.txt")
            with open(path, "wb") as fh:
                fh.write(data)
            traceback.print_exc()
            print(f"fuzz_mllog: exception after {execs} executions (seed {args.seed}); "
                  f"input saved to {path}")
            print(f"stat::number_of_executed_units: {execs + 1}")
            return 1
        execs += 1
    print(f"fuzz_mllog: {execs} executions in {args.seconds:.0f} s, no exception (seed {args.seed})")
    print(f"stat::number_of_executed_units: {execs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
