#!/usr/bin/python3
"""The peer of models_bench's BM_EfficientNetB4TrainStep: one torchvision efficientnet_b4
training step (forward + backward + TensorFlow-form RMSProp as timm's RMSpropTF is not in
torchvision: torch.optim.RMSprop with momentum 0.9, alpha 0.9, eps 1e-3, weight decay 1e-5 off
the norm parameters; label smoothing 0.1; dropout and stochastic depth on), fp32,
channels_last, 2 threads, warm-up 3 steps, median of the timed steps. --bf16: the same step
under CPU bf16 autocast (bf16 convs and matmuls, f32 master weights and optimizer).

Run it as compare_efficientnet.sh does (jemalloc preloaded, ../shared/docs/PEER.md beside the
checkout):
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \
    MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \
    /usr/bin/python3 benchmarks/models/pytorch_efficientnet_step.py --hw 380 --batch 8
Prints one JSON line: {"hw", "batch", "median_s", "images_per_s", ...}.
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hw", type=int, default=380)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast forward (and backward)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torchvision.models.efficientnet_b4().to(memory_format=torch.channels_last)
    model.train()
    # No weight decay on the norm layers' scale and shift (rank 1 parameters that are not biases
    # of the squeeze-excite or the classifier), as the reference.
    norm = {id(p) for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)
            for p in m.parameters()}
    decay = [p for p in model.parameters() if id(p) not in norm]
    no_decay = [p for p in model.parameters() if id(p) in norm]
    opt = torch.optim.RMSprop([{"params": decay, "weight_decay": 1e-5},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=0.016, alpha=0.9, eps=1e-3, momentum=0.9)
    x = torch.rand(args.batch, 3, args.hw, args.hw).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(json.dumps({
        "peer": "pytorch", "torch": torch.__version__, "hw": args.hw, "batch": args.batch,
        "precision": "bf16_autocast" if args.bf16 else "fp32",
        "threads": args.threads, "steps": args.steps, "median_s": med, "min_s": min(times),
        "images_per_s": args.batch / med,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "")}))


if __name__ == "__main__":
    main()
