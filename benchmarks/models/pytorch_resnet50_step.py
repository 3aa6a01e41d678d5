#!/usr/bin/python3
"""The peer of models_bench: one torchvision ResNet-50 training step (forward + backward + SGD
momentum), fp32, channels_last, 2 threads, warm-up 3 steps, median of >= 10 timed steps.
--bf16: the same step under CPU bf16 autocast (torch.autocast("cpu", torch.bfloat16): convs and
matmuls in bf16, f32 master weights and optimizer), the peer of models_bench's bf16 policy.

Run it as compare_resnet50.sh does (jemalloc preloaded, see ../shared/docs/PEER.md (the team docs beside the checkout)):
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \
    MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 \
    /usr/bin/python3 benchmarks/models/pytorch_resnet50_step.py --hw 224 --batch 32
Prints one JSON line: {"hw", "batch", "median_s", "images_per_s", "gflops", ...}.
"""
import torch
import torch.nn.functional as F
import torchvision

import peer_step

FLOP_PER_IMAGE_224 = 24.5e9  # 3 x 4.09 GMAC x 2


def main():
    ap = peer_step.parser(__doc__.splitlines()[0], steps=10)
    ap.add_argument("--hw", type=int, default=224)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()

    peer_step.setup(args)
    model = torchvision.models.resnet50().to(memory_format=torch.channels_last)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-5},
                           {"params": no_decay, "weight_decay": 0.0}], lr=0.01, momentum=0.9)
    x = torch.rand(args.batch, 3, args.hw, args.hw).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        with peer_step.autocast(args):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        opt.step()
        return loss.item()

    timing = peer_step.time_steps(step, args)
    flop = FLOP_PER_IMAGE_224 * (args.hw / 224.0) ** 2  # approximation for other sizes
    peer_step.report(args, timing, hw=args.hw, batch=args.batch,
                     images_per_s=args.batch / timing["median_s"],
                     gflops_approx=args.batch * flop / timing["median_s"] / 1e9)


if __name__ == "__main__":
    main()
