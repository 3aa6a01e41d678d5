"""Summary of a one-thread CPU-time comparison (the compare_*_cpu.sh scripts): per workload and
repetition, our step (models_bench JSON, cpu_time in ms), PyTorch's (peer_step.py --cpu-time
JSON, median_s) and, when present, a baseline build's; the ratio PyTorch / ours is the median of
the per-repetition ratios.

  cpu_time_summary.py DIR REPS TITLE KEY=NAME...
Files read: DIR/ours_KEY_R.json, DIR/base_KEY_R.json, DIR/torch_KEY_R.json for R < REPS.
"""
import json
import statistics
import sys


def ours_ms(path):
    try:
        runs = json.load(open(path)).get("benchmarks", [])
        return runs[0]["cpu_time"] if runs else None  # the benchmark's unit: ms
    except (OSError, ValueError):
        return None


def torch_ms(path):
    try:
        t = json.load(open(path))
        assert t["clock"] == "process_cpu"
        return 1e3 * t["median_s"]
    except (OSError, ValueError, KeyError):
        return None


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main(argv):
    d, reps, title = argv[1], int(argv[2]), argv[3]
    print(f"{title}, one thread's CPU time, ms per step (ratio = PyTorch / ours)")
    for workload in argv[4:]:
        key, name = workload.split("=", 1)
        o = [ours_ms(f"{d}/ours_{key}_{r}.json") for r in range(reps)]
        base = [ours_ms(f"{d}/base_{key}_{r}.json") for r in range(reps)]
        t = [torch_ms(f"{d}/torch_{key}_{r}.json") for r in range(reps)]
        ratios = [y / x for x, y in zip(o, t) if x and y]
        before = [y / x for x, y in zip(base, t) if x and y]
        for r in range(reps):
            line = f"  {name} rep {r}: ours {o[r] or 0:9.1f}  PyTorch {t[r] or 0:9.1f}"
            if base[r]:
                line += f"  before {base[r]:9.1f}"
            print(line)
        print(f"{name}: ratio {med(ratios):.3f} (median of {len(ratios)}); ours "
              f"{med([x for x in o if x]):.1f} ms, PyTorch {med([x for x in t if x]):.1f} ms"
              + (f"; before: ratio {med(before):.3f}, {med([x for x in base if x]):.1f} ms"
                 if before else ""))


if __name__ == "__main__":
    main(sys.argv)
