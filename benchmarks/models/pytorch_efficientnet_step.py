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
import torch
import torch.nn.functional as F
import torchvision

import peer_step


def main():
    ap = peer_step.parser(__doc__.splitlines()[0], steps=5)
    ap.add_argument("--hw", type=int, default=380)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()

    peer_step.setup(args)
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
        with peer_step.autocast(args):
            loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
        loss.backward()
        opt.step()
        return loss.item()

    timing = peer_step.time_steps(step, args)
    peer_step.report(args, timing, hw=args.hw, batch=args.batch,
                     images_per_s=args.batch / timing["median_s"])


if __name__ == "__main__":
    main()
