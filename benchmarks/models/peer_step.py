"""What every PyTorch peer of models_bench shares (pytorch_resnet50_step.py,
pytorch_efficientnet_step.py, pytorch_bert_step.py): the options, the thread setup, the timing
loop and the JSON line each prints, so that the three peers time their steps the same way.

Timing: `--warmup` untimed steps, then the median (and minimum) of `--steps` timed steps. The
clock is wall time by default; `--cpu-time` times the process's CPU time instead
(time.process_time), which other jobs on a loaded host inflate far less than wall time: use it
with `--threads 1` (with more threads it adds up every thread's time).
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch


def parser(description, steps):
    """The options every peer takes; a peer adds its own shape options."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--steps", type=int, default=steps, help="timed steps (median of them)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast forward (and backward)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time the process's CPU time, not wall time (use with --threads 1)")
    return ap


def setup(args):
    """Threads and the seed, before the model is built."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)


def autocast(args):
    """The step's precision context: CPU bf16 autocast with --bf16 (bf16 convolutions and
    matmuls, f32 master weights and optimizer), f32 otherwise."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16)


def time_steps(step, args):
    """Runs `step` (returns the loss) warm-up then timed; returns the timing and the last loss."""
    clock = time.process_time if args.cpu_time else time.perf_counter
    loss = None
    for _ in range(args.warmup):
        loss = step()
    times = []
    for _ in range(args.steps):
        t0 = clock()
        loss = step()
        times.append(clock() - t0)
    return {"median_s": statistics.median(times), "min_s": min(times), "steps": args.steps,
            "clock": "process_cpu" if args.cpu_time else "wall", "loss": loss}


def report(args, timing, **fields):
    """Prints the one JSON line: the peer's own fields, the timing and where it came from."""
    print(json.dumps({
        "peer": "pytorch", "torch": torch.__version__, **fields,
        "precision": "bf16_autocast" if args.bf16 else "fp32", "threads": args.threads,
        **timing,
        # Peak resident memory of the process (model, activations, allocator caches).
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "")}))
