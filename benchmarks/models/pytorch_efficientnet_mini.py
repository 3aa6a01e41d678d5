#!/usr/bin/python3
"""PyTorch cross-check of the EfficientNet-B4 mini run's learning (issue 30).

torchvision's efficientnet_b4 at the mini run's shape (28x28x1 Fashion-MNIST, 10 classes,
batch 32), trained with the closed recipe's optimizer as models/efficientnet_b4 does
(RMSProp in TensorFlow's form: ms starts at 1, eps 1e-3 inside the root, lr inside the
momentum; weight decay 1e-5 off 1-D parameters; label smoothing 0.1; dropout 0.4; stochastic
depth 0.2; linear warm-up over the first epoch). Prints the training loss of every step and,
after every epoch, the accuracy on the training images themselves (eval mode: running
batch-norm statistics), so that a run at chance can be told apart from an evaluation bug.

    benchmarks/models/pytorch_efficientnet_mini.py --lr 0.002 --epochs 4 --images 256
"""
import argparse
import gzip
import math

import numpy as np
import torch
import torchvision


def idx(path, images):
    data = gzip.open(path).read()
    if images:
        return np.frombuffer(data, np.uint8, offset=16).reshape(-1, 28, 28)
    return np.frombuffer(data, np.uint8, offset=8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--batch", type=int, default=32,
                    help="32: the POD4 preset's global batch; 16: POD1's (LR 0.001)")
    ap.add_argument("--ms-init", type=float, default=1.0, help="RMSProp ms start (TF: 1)")
    ap.add_argument("--classifier-init", choices=["torchvision", "reference1000"],
                    default="torchvision",
                    help="torchvision: U(+-1/sqrt(10)) at 10 classes; reference1000: the "
                    "range of the reference's 1000-class head, U(+-1/sqrt(1000))")
    ap.add_argument("--no-regularisation", action="store_true",
                    help="dropout, stochastic depth and label smoothing 0")
    ap.add_argument("--adam", action="store_true", help="Adam 1e-3 instead of RMSProp")
    ap.add_argument("--train-mode-eval", action="store_true",
                    help="score with batch statistics instead of the running ones")
    ap.add_argument("--bn-momentum", type=float, default=None,
                    help="PyTorch's batch-norm momentum (default 0.1: torchvision; the mini "
                    "recipe 0.5)")
    ap.add_argument("--eval-images", type=int, default=0,
                    help="> 0: score on this many Fashion-MNIST test images (the mini target's "
                    "metric) instead of the training images")
    ap.add_argument("--mini-recipe", action="store_true",
                    help="the closed mini recipe of docs/rules/efficientnet_b4.md: "
                    "--classifier-init reference1000 --no-regularisation --bn-momentum 0.5 (unless given)")
    ap.add_argument("--recalibrate-bn", action="store_true",
                    help="before scoring, recompute the running batch-norm statistics as the "
                    "plain average over the training images at the current weights")
    a = ap.parse_args()
    if a.mini_recipe:
        a.classifier_init, a.no_regularisation = "reference1000", True
        a.bn_momentum = 0.5 if a.bn_momentum is None else a.bn_momentum
    a.bn_momentum = 0.1 if a.bn_momentum is None else a.bn_momentum
    torch.manual_seed(0)
    torch.set_num_threads(1)
    n, batch = a.images, a.batch
    x = torch.tensor(idx(f"{a.data_dir}/train-images-idx3-ubyte.gz", True)[:n].copy())
    x = x.float().div(255).unsqueeze(1)
    y = torch.tensor(idx(f"{a.data_dir}/train-labels-idx1-ubyte.gz", False)[:n].copy()).long()
    mean, std = x.mean(), x.std()
    x = (x - mean) / std
    if a.eval_images > 0:
        xe = torch.tensor(idx(f"{a.data_dir}/t10k-images-idx3-ubyte.gz", True)[:a.eval_images]
                          .copy()).float().div(255).unsqueeze(1)
        xe = (xe - mean) / std
        ye = torch.tensor(idx(f"{a.data_dir}/t10k-labels-idx1-ubyte.gz", False)[:a.eval_images]
                          .copy()).long()
    else:
        xe, ye = x, y
    reg = not a.no_regularisation
    m = torchvision.models.efficientnet_b4(num_classes=10, stochastic_depth_prob=0.2 * reg)
    m.classifier[0].p = 0.4 * reg  # efficientnet_b4 fixes its dropout at 0.4
    m.features[0][0] = torch.nn.Conv2d(1, 48, 3, 2, 1, bias=False)  # one input channel
    torch.nn.init.kaiming_normal_(m.features[0][0].weight, mode="fan_out")
    if a.classifier_init == "reference1000":
        r = 1 / math.sqrt(1000)
        torch.nn.init.uniform_(m.classifier[1].weight, -r, r)
    for bn in m.modules():
        if isinstance(bn, torch.nn.BatchNorm2d):
            bn.momentum = a.bn_momentum
    params = list(m.parameters())
    ms = [torch.full_like(p, a.ms_init) for p in params]
    mom = [torch.zeros_like(p) for p in params]
    adam = torch.optim.Adam(params, 1e-3) if a.adam else None
    ce = torch.nn.CrossEntropyLoss(label_smoothing=0.1 * reg)
    steps_per_epoch, step = n // batch, 0
    for epoch in range(a.epochs):
        perm = torch.randperm(n)
        m.train()
        for b in range(steps_per_epoch):
            sel = perm[b * batch:(b + 1) * batch]
            loss = ce(m(x[sel]), y[sel])
            m.zero_grad()
            loss.backward()
            step += 1
            if adam:
                adam.step()
            else:
                lr = a.lr * min(1.0, step / steps_per_epoch)
                with torch.no_grad():
                    for p, s, v in zip(params, ms, mom):
                        g = p.grad + (1e-5 * p if p.dim() > 1 else 0)
                        s.mul_(0.9).add_(0.1 * g * g)
                        v.mul_(0.9).add_(lr * g / torch.sqrt(s + 1e-3))
                        p.sub_(v)
            print(f"step {step} loss {loss.item():.3f}", flush=True)
        if a.recalibrate_bn:
            for bn in m.modules():
                if isinstance(bn, torch.nn.BatchNorm2d):
                    bn.reset_running_stats()
                    bn.momentum = None  # cumulative average
            with torch.no_grad():
                for b in range(steps_per_epoch):
                    m(x[b * batch:(b + 1) * batch])
            for bn in m.modules():
                if isinstance(bn, torch.nn.BatchNorm2d):
                    bn.momentum = a.bn_momentum
        m.train(a.train_mode_eval)
        with torch.no_grad():
            acc = torch.cat([m(xe[i:i + 256]).argmax(1) == ye[i:i + 256]
                             for i in range(0, len(ye), 256)]).float().mean().item()
        where = "test" if a.eval_images > 0 else "training"
        print(f"epoch {epoch + 1} ({(epoch + 1) * steps_per_epoch * batch} samples): accuracy "
              f"on the {where} images {acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
