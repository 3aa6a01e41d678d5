#!/usr/bin/python3
"""Writes tests/fixtures/resnet50/resnet_goldens.json: PyTorch reference results for the C++
ResNet (models/resnet50) on deterministic golden weights and inputs (golden_weights.py).

Run with Debian's interpreter (torch 1.13, torchvision 0.14):
    /usr/bin/python3 scripts/goldens/make_resnet_goldens.py

Cases (all float32, CPU, 2 threads, deterministic algorithms):
  small        ResNetConfig::small() + label smoothing 0.1, batch 8: step-1 logits, loss, the
               full gradient of every parameter, 5 SGD-momentum steps (losses, final running
               statistics, final fc1_bias) and eval-mode logits with the trained weights.
  small_mnist  blocks [1,1,1,1], width 8, 28x28x1, SmallImage stem, batch 4: logits, loss,
               gradient summaries (checks the small-image stem).
  full         torchvision.models.resnet50() at 224x224, computed in float64 (see below):
               train-mode batch norm with batch 2 (as MLPerf trains; stage 4 is 7x7, so 98
               rows per channel): logits, loss and gradient summaries of a few tensors (first
               256 values, sum, sum of |g|, sum of squares); eval mode with the golden running
               statistics, batch 1: logits.
Large arrays are little-endian float32, base64 encoded. Each case also records how far the
float32 results are from a float64 run of the same computation (the noise floor for the
tolerances in tests/models).
"""
import base64
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.resnet import Bottleneck

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_weights as gw  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "resnet50", "resnet_goldens.json")


# ---- the C++ model's variables, names and layouts ------------------------------------------
def resnet_variables(cfg):
    """[(name, shape in C++ layout)] for parameters (canonical order) and running statistics."""
    params, stats = [], []

    def conv(name, k, r, c):
        params.append((name + "_weight", (k, r, r, c)))

    def bn(name, c):
        params.append((name + "_gamma", (c,)))
        params.append((name + "_beta", (c,)))
        stats.append((name + "_running_mean", (c,)))
        stats.append((name + "_running_var", (c,)))

    w0 = cfg["base_width"]
    conv("conv0", w0, 7 if cfg["stem"] == "imagenet" else 3, cfg["input_c"])
    bn("bn0", w0)
    ch = w0
    for s, blocks in enumerate(cfg["blocks"]):
        width = w0 << s
        out = width * 4
        for u in range(blocks):
            p = f"stage{s + 1}_unit{u + 1}_"
            conv(p + "conv1", width, 1, ch)
            bn(p + "bn1", width)
            conv(p + "conv2", width, 3, width)
            bn(p + "bn2", width)
            conv(p + "conv3", out, 1, width)
            bn(p + "bn3", out)
            if u == 0:
                conv(p + "conv1sc", out, 1, ch)
                bn(p + "bnsc", out)
            ch = out
    params.append(("fc1_weight", (ch, cfg["classes"])))
    params.append(("fc1_bias", (cfg["classes"],)))
    return params, stats


def torch_name(name):
    """Canonical name -> torchvision attribute path."""
    if name.startswith("fc1_"):
        return "fc." + name[4:]
    suffix_map = {"weight": "weight", "gamma": "weight", "beta": "bias",
                  "running_mean": "running_mean", "running_var": "running_var"}
    for suffix, attr in suffix_map.items():
        if name.endswith("_" + suffix):
            base = name[: -len(suffix) - 1]
            break
    else:
        raise ValueError(name)
    if base == "conv0":
        return "conv1." + attr
    if base == "bn0":
        return "bn1." + attr
    stage, unit, layer = base.split("_")
    s, u = int(stage[5:]), int(unit[4:]) - 1
    sub = {"conv1sc": "downsample.0", "bnsc": "downsample.1"}.get(layer, layer)
    return f"layer{s}.{u}.{sub}.{attr}"


def to_torch_layout(name, a):
    if a.ndim == 4:  # [K,R,S,C] -> [K,C,R,S]
        return a.transpose(0, 3, 1, 2)
    if name == "fc1_weight":  # [in,out] -> [out,in]
        return a.T
    return a


def from_torch_layout(name, a):
    if a.ndim == 4:  # [K,C,R,S] -> [K,R,S,C]
        return a.transpose(0, 2, 3, 1)
    if name == "fc1_weight":
        return a.T
    return a


# ---- the torch networks --------------------------------------------------------------------
class SmallResNet(nn.Module):
    """torchvision's ResNet with a configurable width and stem (same attribute names)."""

    def __init__(self, cfg):
        super().__init__()
        w0 = cfg["base_width"]
        if cfg["stem"] == "imagenet":
            self.conv1 = nn.Conv2d(cfg["input_c"], w0, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        else:
            self.conv1 = nn.Conv2d(cfg["input_c"], w0, 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(w0)
        self.relu = nn.ReLU(inplace=True)
        ch = w0
        for s, blocks in enumerate(cfg["blocks"]):
            width = w0 << s
            layers = []
            for u in range(blocks):
                stride = 2 if (s > 0 and u == 0) else 1
                down = None
                if u == 0:
                    down = nn.Sequential(nn.Conv2d(ch, width * 4, 1, stride, bias=False),
                                         nn.BatchNorm2d(width * 4))
                layers.append(Bottleneck(ch, width, stride, down))  # v1.5: stride on conv2
                ch = width * 4
            setattr(self, f"layer{s + 1}", nn.Sequential(*layers))
        self.num_stages = len(cfg["blocks"])
        self.fc = nn.Linear(ch, cfg["classes"])

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for s in range(self.num_stages):
            x = getattr(self, f"layer{s + 1}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def make_model(cfg):
    if cfg.get("torchvision"):
        return torchvision.models.resnet50(num_classes=cfg["classes"])
    return SmallResNet(cfg)


def load_golden(model, cfg, dtype):
    params, stats = resnet_variables(cfg)
    sd = model.state_dict()
    expected = {torch_name(n) for n, _ in params + stats}
    missing = {k for k in sd if not k.endswith("num_batches_tracked")} - expected
    assert not missing, f"torch tensors without a canonical name: {sorted(missing)}"
    with torch.no_grad():
        for name, shape in params + stats:
            t = sd[torch_name(name)]
            a = to_torch_layout(name, gw.golden_variable(name, shape))
            assert tuple(t.shape) == a.shape, (name, t.shape, a.shape)
            t.copy_(torch.from_numpy(np.ascontiguousarray(a)).to(dtype))
    model.to(dtype)
    return dict(model.named_parameters()), dict(model.named_buffers())


def batch(cfg, n, dtype):
    x = gw.golden_images((n, cfg["input_h"], cfg["input_w"], cfg["input_c"]))
    y = gw.golden_labels(n, cfg["classes"])
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(dtype)
    return x, y, xt, torch.from_numpy(y)


# ---- encoding ------------------------------------------------------------------------------
def f32(x):
    return float(np.float32(x))


def enc(a):
    a = np.ascontiguousarray(np.asarray(a, dtype="<f4"))
    return {"shape": list(a.shape), "f32_b64": base64.b64encode(a.tobytes()).decode("ascii")}


def summary(a, head=256):
    a = np.asarray(a, dtype=np.float64).ravel()
    return {"count": int(a.size), "head": enc(a[:head].astype(np.float32)),
            "sum": float(a.sum()), "sum_abs": float(np.abs(a).sum()),
            "sum_sq": float((a * a).sum()), "abs_max": float(np.abs(a).max())}


def l2_rel(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def rel_dev(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


# ---- cases ---------------------------------------------------------------------------------
def train_case(cfg, n, steps, sgd, dtype):
    """Step-1 logits/loss/grads, then `steps` SGD steps; returns numpy results."""
    model = make_model(cfg)
    named, buffers = load_golden(model, cfg, dtype)
    model.train()
    params, stats = resnet_variables(cfg)
    by_name = {p: named[torch_name(p)] for p, _ in params}
    decay = [by_name[p] for p, _ in params if p.endswith("_weight")]
    no_decay = [by_name[p] for p, _ in params if not p.endswith("_weight")]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": sgd["weight_decay"]},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=sgd["lr"], momentum=sgd["momentum"])
    _, _, x, y = batch(cfg, n, dtype)
    r = {"losses": []}
    for k in range(max(steps, 1)):
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=cfg["label_smoothing"])
        loss.backward()
        if k == 0:
            r["logits"] = logits.detach().numpy()
            r["loss"] = loss.item()
            r["grads"] = {p: from_torch_layout(p, by_name[p].grad.numpy().copy())
                          for p, _ in params}
        r["losses"].append(loss.item())
        if steps:
            opt.step()
    if steps:
        r["running"] = {s: buffers[torch_name(s)].numpy().copy() for s, _ in stats}
        r["fc1_bias"] = by_name["fc1_bias"].detach().numpy().copy()
        model.eval()
        with torch.no_grad():
            r["eval_logits"] = model(x).numpy()
    return r


def eval_logits(cfg, n, dtype):
    model = make_model(cfg)
    load_golden(model, cfg, dtype)
    model.eval()
    _, _, x, _ = batch(cfg, n, dtype)
    with torch.no_grad():
        return model(x).numpy()


def grad_deviation(r32, r64):
    return max(rel_dev(r32["grads"][p], r64["grads"][p]) for p in r32["grads"])


SMALL = {"blocks": [1, 1, 1, 1], "base_width": 8, "input_h": 32, "input_w": 32, "input_c": 3,
         "classes": 10, "stem": "imagenet", "label_smoothing": 0.1}
SMALL_MNIST = {"blocks": [1, 1, 1, 1], "base_width": 8, "input_h": 28, "input_w": 28,
               "input_c": 1, "classes": 10, "stem": "small_image", "label_smoothing": 0.0}
FULL = {"blocks": [3, 4, 6, 3], "base_width": 64, "input_h": 224, "input_w": 224, "input_c": 3,
        "classes": 1000, "stem": "imagenet", "label_smoothing": 0.0, "torchvision": True}
SGD = {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4, "decay": "*_weight only"}
FULL_GRADS = ["conv0_weight", "bn0_gamma", "stage1_unit1_conv1sc_weight",
              "stage2_unit1_conv2_weight", "stage4_unit3_conv3_weight", "stage4_unit3_bn3_beta",
              "fc1_weight", "fc1_bias"]


def main():
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    out = {"format": "ipu-resnet-goldens/1", "generator": "scripts/goldens/make_resnet_goldens.py",
           "torch": torch.__version__, "torchvision": torchvision.__version__,
           "golden_weights": "models/resnet50/golden_weights.h", "cases": {}}

    # small: everything, in full.
    n, steps = 8, 5
    r = train_case(SMALL, n, steps, SGD, torch.float32)
    r64 = train_case(SMALL, n, steps, SGD, torch.float64)
    x, y, _, _ = batch(SMALL, n, torch.float32)
    out["cases"]["small"] = {
        "config": SMALL, "batch": n, "sgd": SGD, "steps": steps,
        "images_head": [f32(v) for v in x.ravel()[:16]], "labels": [int(v) for v in y],
        "logits": enc(r["logits"]), "loss": r["loss"],
        "grads": {p: enc(g) for p, g in r["grads"].items()},
        "step_losses": r["losses"],
        "final_running": {s: enc(v) for s, v in r["running"].items()},
        "final_fc1_bias": enc(r["fc1_bias"]), "eval_logits": enc(r["eval_logits"]),
        "f64_deviation": {"logits": rel_dev(r["logits"], r64["logits"]),
                          "grads_max_rel": grad_deviation(r, r64),
                          "step_losses": rel_dev(r["losses"], r64["losses"]),
                          "eval_logits": rel_dev(r["eval_logits"], r64["eval_logits"])}}

    # small_mnist: the small-image stem.
    n = 4
    r = train_case(SMALL_MNIST, n, 0, SGD, torch.float32)
    r64 = train_case(SMALL_MNIST, n, 0, SGD, torch.float64)
    out["cases"]["small_mnist"] = {
        "config": SMALL_MNIST, "batch": n, "logits": enc(r["logits"]), "loss": r["loss"],
        "grads": {p: summary(g) for p, g in r["grads"].items()},
        "f64_deviation": {"logits": rel_dev(r["logits"], r64["logits"]),
                          "grads_max_rel": grad_deviation(r, r64)}}

    # full ResNet-50 (torchvision). The reference is the float64 run: in float32 a handful of
    # relu inputs within rounding of zero flip, which moves the deep gradients by ~0.4% (L2) in
    # any float32 implementation; "f32_l2_rel" records that noise floor per tensor.
    n = 2
    r = train_case(FULL, n, 0, SGD, torch.float64)
    r32 = train_case(FULL, n, 0, SGD, torch.float32)
    e = eval_logits(FULL, 1, torch.float64)
    e32 = eval_logits(FULL, 1, torch.float32)
    out["cases"]["full"] = {
        "config": {k: v for k, v in FULL.items() if k != "torchvision"},
        "reference": "torchvision resnet50, float64",
        "train": {"batch": n, "bn": "train", "logits": enc(r["logits"]), "loss": r["loss"],
                  "grads": {p: dict(summary(r["grads"][p]),
                                    f32_l2_rel=l2_rel(r32["grads"][p], r["grads"][p]))
                            for p in FULL_GRADS},
                  "f32_deviation": {"logits": rel_dev(r32["logits"], r["logits"]),
                                    "loss": abs(r32["loss"] / r["loss"] - 1)}},
        "eval": {"batch": 1, "bn": "inference (golden running statistics)", "logits": enc(e),
                 "f32_deviation": {"logits": rel_dev(e32, e)}}}

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for name, c in out["cases"].items():
        if name == "full":
            print(name, "f32 vs f64:", json.dumps(c["train"]["f32_deviation"]),
                  json.dumps({p: g["f32_l2_rel"] for p, g in c["train"]["grads"].items()}),
                  json.dumps(c["eval"]["f32_deviation"]))
        else:
            print(name, "f32 vs f64:", json.dumps(c["f64_deviation"]))
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")


if __name__ == "__main__":
    main()
