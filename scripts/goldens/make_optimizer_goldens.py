#!/usr/bin/python3
"""Writes tests/fixtures/optimizers/optimizer_goldens.json: torch.optim results that the
optimizers of ipu_backend/optimizers must reproduce (tests/backend/optimizers_test.cpp).

Run with Debian's interpreter (torch 1.13):
    /usr/bin/python3 scripts/goldens/make_optimizer_goldens.py

Cases (float32, CPU): one weight of 16 values, 5 steps with the gradients and learning rates
recorded here, the weight after every step.
  sgd            torch.optim.SGD(momentum=0.9, weight_decay=0.01)
  sgd_nesterov   torch.optim.SGD(momentum=0.9, weight_decay=0.01, nesterov=True)
  adam           torch.optim.Adam(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
PyTorch has no LAMB and its RMSprop is not TensorFlow's (epsilon outside the root, mean square
starting at 0); those are checked against the double-precision references in the test.
"""
import json
import os

import torch

CASES = {
    "sgd": lambda p: torch.optim.SGD([p], lr=1.0, momentum=0.9, weight_decay=0.01),
    "sgd_nesterov": lambda p: torch.optim.SGD([p], lr=1.0, momentum=0.9, weight_decay=0.01,
                                              nesterov=True),
    "adam": lambda p: torch.optim.Adam([p], lr=1.0, betas=(0.9, 0.999), eps=1e-8,
                                       weight_decay=0.01),
}
LRS = [0.05, 0.02, 0.04, 0.01, 0.03]


def main():
    torch.manual_seed(1234)
    w0 = torch.rand(16) * 2 - 1
    grads = [torch.rand(16) * 2 - 1 for _ in LRS]
    out = {"w0": w0.tolist(), "grads": [g.tolist() for g in grads], "lr": LRS, "cases": {}}
    for name, make in CASES.items():
        p = torch.nn.Parameter(w0.clone())
        opt = make(p)
        after = []
        for g, lr in zip(grads, LRS):
            for group in opt.param_groups:
                group["lr"] = lr
            p.grad = g.clone()
            opt.step()
            after.append(p.detach().clone().tolist())
        out["cases"][name] = after
    path = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures", "optimizers",
                        "optimizer_goldens.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(path))


if __name__ == "__main__":
    main()
