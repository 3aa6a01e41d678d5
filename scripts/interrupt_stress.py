#!/usr/bin/env python3
"""Interrupts short run_benchmark runs at varied moments and checks that each ends cleanly.

    scripts/interrupt_stress.py --binary build/harness/run_benchmark --count 50

Each try starts a two-run open mini ResNet-50 package (small config: seconds per run after the
compile) and sends SIGINT (or SIGTERM, every third try) at one of these moments, in turn:

  preflight  during the fit-check compile, before anything is written
  package    just after the fit check, while the package folder is created and written
  compile    during run 0's compile and weight init (after init_start)
  data       while run 0 reads its data set (after run_start: the clock runs, no step yet)
  step       in run 0's first training steps (after epoch_start: the data set is read)
  eval       during an evaluation (after eval_start)
  between    at the end of run 0 / the start of run 1 (its log is being created)

and the delay within the moment is drawn from --seed. --emulate-avx2 holds every run-time CPU
dispatcher of the process to AVX2 (oneDNN, OpenCV, glibc's string functions), as on a host
without AVX-512; --malloc-check adds glibc's heap consistency checks (libc_malloc_debug) and
fills freed memory, so that a heap corruption ends the try instead of passing unseen. A try passes when the process exits with
128 + the signal (130, 143), every result file present is a complete log (every line a whole
MLLOG record, exactly one run_stop and it is the last line; the interrupted run's is `aborted`
with run_abort_reason naming the signal and no later run started; a run the signal did not
reach is the complete run), the system description
(when written) is whole JSON with no temporary file left, and, when the official checker is
installed (.venv of scripts/setup.sh), the checker reads every log with no complaint other than
the accuracy target. Exit status 0 when every try passed; one line per try either way.
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
MOMENTS = ["preflight", "package", "compile", "data", "step", "eval", "between"]
# Micro-batch 8, 16 training images (2 steps) and 16 evaluated per epoch, an unreachable
# target: every run trains its two epochs, with an evaluation after each.
CONFIG = {"micro_batch_size": 8, "model_bn_span": 8, "sgd_opt_base_learning_rate": 0.012,
          "mini_train_samples": 16, "mini_eval_samples": 16, "mini_target_accuracy": 0.99,
          "eval_period": 1}
SYSTEM = "ipu-pod1-emulated"


def have_checker():
    if not VENV_PYTHON.exists():
        return False
    return subprocess.run([str(VENV_PYTHON), "-c", "import mlperf_logging"],
                          capture_output=True).returncode == 0


def records(path):
    """The MLLOG records of a log; raises ValueError naming the line that is not whole."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith(":::MLLOG "):
            raise ValueError(f"{path}:{n}: not an MLLOG line: {line[:80]!r}")
        try:
            out.append(json.loads(line[len(":::MLLOG "):]))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: truncated or broken record ({e}): {line[:80]!r}")
    return out


def checker_complaints(log, cwd):
    r = subprocess.run([str(VENV_PYTHON), "-m", "mlperf_logging.compliance_checker", "--usage",
                        "training", "--ruleset", "4.0.0", str(log)],
                       capture_output=True, text=True, cwd=cwd)
    text = r.stdout + r.stderr
    if "Traceback" in text:
        return [f"checker traceback on {log}: {text[-500:]}"]
    fails = [l for l in text.splitlines() if "failed test" in l or "Required" in l]
    return [f"{log}: {l}" for l in fails if "eval_accuracy" not in l and "0.7590" not in l]


# The moments marked by the first run's log: the key that starts each, and the longest random
# delay after it before the signal.
LOG_MOMENTS = {
    "compile": ("init_start", 2.0),
    # Reading Fashion-MNIST takes 0.5-3 s after run_start; the steps start at epoch_start.
    "data": ("run_start", 0.5),
    "step": ("epoch_start", 1.0),
    "eval": ("eval_start", 0.3),
    "between": ("run_stop", 0.5),
}


def wait_for(cond, proc, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def log_has(path, key):
    return lambda: path.exists() and f'"key": "{key}"' in path.read_text()


# glibc's x86 feature names of AVX-512: masked off, its string functions take their AVX2 forms.
AVX512_HWCAPS = ["AVX512F", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512VL", "AVX512ER",
                 "AVX512PF", "AVX512_VNNI", "AVX512_BF16", "AVX512_4FMAPS", "AVX512_4VNNIW",
                 "AVX512_BITALG", "AVX512_IFMA", "AVX512_VBMI", "AVX512_VBMI2",
                 "AVX512_VPOPCNTDQ", "AVX512_FP16"]
# OpenCV's names (4.6) of the features above AVX2 (OPENCV_CPU_DISABLE).
OPENCV_AVX512 = ["AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL", "AVX512ER",
                 "AVX512PF", "AVX512IFMA", "AVX512VBMI", "AVX512VBMI2", "AVX512VNNI",
                 "AVX512BITALG", "AVX512VPOPCNTDQ", "AVX5124FMAPS", "AVX5124VNNIW",
                 "AVX512-SKX", "AVX512-COMMON", "AVX512-KNL", "AVX512-KNM", "AVX512-CNL",
                 "AVX512-CLX", "AVX512-ICL"]
MALLOC_DEBUG = pathlib.Path("/lib/x86_64-linux-gnu/libc_malloc_debug.so.0")


def child_env(emulate_avx2, malloc_check):
    """The environment of the tried process. emulate_avx2: every run-time CPU dispatcher held to
    AVX2 (pair it with a build for -march=x86-64-v3, IPU_MARCH, for the compile-time paths);
    malloc_check: glibc checks its heap on every call and fills freed memory with 0xa5."""
    env = dict(os.environ)
    tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t]
    if emulate_avx2:
        env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
        env["OPENCV_CPU_DISABLE"] = ",".join(OPENCV_AVX512)
        tunables.append("glibc.cpu.hwcaps=" + ",".join("-" + c for c in AVX512_HWCAPS))
    if malloc_check:
        if not MALLOC_DEBUG.exists():
            sys.exit(f"--malloc-check needs {MALLOC_DEBUG} (glibc >= 2.34)")
        env["LD_PRELOAD"] = " ".join(filter(None, [env.get("LD_PRELOAD"), str(MALLOC_DEBUG)]))
        env["MALLOC_CHECK_"] = "3"
        env["MALLOC_PERTURB_"] = "165"
    if tunables:
        env["GLIBC_TUNABLES"] = ":".join(tunables)
    return env


def one_try(binary, index, moment, sig, rng, workdir, use_checker, timeout, env):
    d = workdir / f"try_{index:03d}"
    d.mkdir()
    (d / "c.json").write_text(json.dumps(CONFIG))
    results = d / "results"
    bench = results / "ipu_mlperf" / "results" / SYSTEM / "resnet"
    log0, log1 = bench / "result_0.txt", bench / "result_1.txt"
    cmd = [binary, "--division", "open", "--runs", "2", "--max-epochs", "2", "--threads", "2",
           "--config", str(d / "c.json"), "--results-dir", str(results)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    err_lines = []
    compiling, fits = threading.Event(), threading.Event()

    def read_stderr():
        for line in p.stderr:
            err_lines.append(line)
            if line.startswith("compiling "):
                compiling.set()
            if line.startswith("fits:"):
                fits.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    out_text = []
    out_reader = threading.Thread(target=lambda: out_text.append(p.stdout.read()), daemon=True)
    out_reader.start()

    reached = True
    if moment == "preflight":
        reached = wait_for(compiling.is_set, p, timeout)
        time.sleep(rng.uniform(0.0, 3.0))
        reached = reached and not fits.is_set()
    elif moment == "package":
        reached = wait_for(fits.is_set, p, timeout)
        time.sleep(rng.uniform(0.0, 0.05))
    elif moment in LOG_MOMENTS:
        key, max_delay = LOG_MOMENTS[moment]
        reached = wait_for(log_has(log0, key), p, timeout)
        time.sleep(rng.uniform(0.0, max_delay))
    p.send_signal(sig)
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    reader.join(5)
    out_reader.join(5)
    stderr = "".join(err_lines)
    problems = []
    if not reached:
        problems.append(f"the moment '{moment}' was not reached (process ended or timed out)")
    expected = 128 + sig
    if p.returncode != expected:
        problems.append(f"exit {p.returncode}, expected {expected}: {stderr[-1500:]}")
    name = signal.Signals(sig).name
    logs = sorted(bench.glob("result_*.txt")) if bench.exists() else []
    for log in logs:
        try:
            ev = records(log)
        except ValueError as e:
            problems.append(str(e))
            continue
        stops = [e for e in ev if e["key"] == "run_stop"]
        if len(stops) != 1 or ev[-1]["key"] != "run_stop":
            problems.append(f"{log}: {len(stops)} run_stop, last key {ev[-1]['key'] if ev else None}")
            continue
        status = stops[0]["metadata"].get("status")
        reason = ev[-2]["value"] if len(ev) > 1 and ev[-2]["key"] == "run_abort_reason" else ""
        if status == "aborted" and name in str(reason):
            if log != logs[-1]:
                problems.append(f"{log}: interrupted, yet a later run started")
        elif status != "aborted" or "target accuracy" not in str(reason):
            # A run the signal did not reach trains its 2 epochs to the (unreachable) target.
            problems.append(f"{log}: run_stop {status}, reason {reason!r}: neither the complete "
                            f"run nor aborted by {name}")
        if use_checker:
            problems += checker_complaints(log, workdir)
    if log1.exists() and not log0.exists():
        problems.append("result_1.txt without result_0.txt")
    if len(logs) > 2:
        problems.append(f"{len(logs)} result files")
    systems = results / "ipu_mlperf" / "systems"
    if systems.exists():
        for f in systems.iterdir():
            if f.suffix != ".json":
                problems.append(f"left behind: {f}")
                continue
            try:
                json.loads(f.read_text())
            except json.JSONDecodeError as e:
                problems.append(f"{f}: not whole JSON ({e})")
    if moment == "preflight" and reached and logs:
        problems.append("interrupted before the package was written, yet result files exist")
    return problems, len(logs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=str(ROOT / "build" / "harness" / "run_benchmark"))
    ap.add_argument("--count", type=int, default=6, help="tries (default 6: each moment once)")
    ap.add_argument("--seed", type=int, default=1, help="draws the delays and the signals")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per try at most")
    ap.add_argument("--keep", action="store_true", help="keep the tries' folders")
    ap.add_argument("--moments", default=",".join(MOMENTS),
                    help="the moments to cycle through (default: all, in the order above)")
    ap.add_argument("--emulate-avx2", action="store_true",
                    help="hold oneDNN, OpenCV and glibc to AVX2, as on a host without AVX-512")
    ap.add_argument("--malloc-check", action="store_true",
                    help="glibc's heap checks on every allocation (libc_malloc_debug)")
    args = ap.parse_args()
    env = child_env(args.emulate_avx2, args.malloc_check)
    rng = random.Random(args.seed)
    moments = args.moments.split(",")
    unknown = [m for m in moments if m not in MOMENTS]
    if unknown:
        ap.error(f"unknown moment(s) {unknown}; known: {MOMENTS}")
    use_checker = have_checker()
    if args.emulate_avx2 or args.malloc_check:
        print(f"environment: {'AVX2 emulation ' if args.emulate_avx2 else ''}"
              f"{'malloc checks' if args.malloc_check else ''}", flush=True)
    if not use_checker:
        print("note: the official checker is missing (bash scripts/setup.sh); logs are checked "
              "for completeness only", flush=True)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="interrupt_stress_"))
    failures = 0
    t0 = time.monotonic()
    for i in range(args.count):
        moment = moments[i % len(moments)]
        sig = signal.SIGTERM if i % 3 == 2 else signal.SIGINT
        t = time.monotonic()
        problems, nlogs = one_try(args.binary, i, moment, sig, rng, workdir, use_checker,
                                  args.timeout, env)
        verdict = "ok" if not problems else "FAIL"
        print(f"try {i + 1}/{args.count}: {moment:9s} {signal.Signals(sig).name:7s} {verdict} "
              f"({nlogs} log(s), {time.monotonic() - t:.0f} s)", flush=True)
        for pr in problems:
            print(f"    {pr}", flush=True)
        failures += bool(problems)
    print(f"{args.count - failures} of {args.count} interrupts ended cleanly "
          f"({time.monotonic() - t0:.0f} s)", flush=True)
    if not args.keep and failures == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    elif failures:
        print(f"folders kept in {workdir}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
