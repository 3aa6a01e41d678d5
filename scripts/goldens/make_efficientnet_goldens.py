#!/usr/bin/python3
"""Writes tests/fixtures/efficientnet_b4/efficientnet_goldens.json: torchvision EfficientNet
results for the C++ model (models/efficientnet_b4) on deterministic golden weights and inputs
(golden_weights.py), copied into torchvision's modules by name.

Run with Debian's interpreter (torch 1.13, torchvision 0.14; no download, random weights):
    /usr/bin/python3 scripts/goldens/make_efficientnet_goldens.py

Cases (CPU, 2 threads, deterministic algorithms; dropout and stochastic depth off):
  small      torchvision's EfficientNet class on Config::small()'s block table (width 0.5,
             depth 1, 32x32x3, 10 classes), batch norm in training mode, label smoothing 0.1,
             batch 4: logits, loss, every gradient (summaries: first 256 values, sum, sum of |g|,
             sum of squares), running statistics after the step.
  small_g16  the same with expansion 4 and every depthwise conv replaced by a group conv of 16
             channels per group (groups = max(1, C // 16)), as Graphcore's G16.
  small_gn   the same as small with GroupNorm(4 groups, eps 1e-5) in place of batch norm.
  b4_train   torchvision.models.efficientnet_b4() in training mode at 64x64, batch 2: logits,
             loss, summaries of a sample of gradients (B4_GRADS).  g16_train: the same as G16.
  b4_eval    torchvision.models.efficientnet_b4() in eval mode (golden running statistics) at
             64x64, batch 2: logits.  b4_eval_380: the same at 380x380, batch 1 (benchmark).
  g16_eval   b4 as G16 in eval mode at 64x64, batch 2: logits.
Every case is computed in float64 (the reference) and float32; "f32_dev" records how far
float32 itself is from float64 (the noise floor for the C++ tolerances).
"""
import base64
import json
import math
import os
import sys
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.efficientnet import EfficientNet, MBConv, MBConvConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_weights as gw  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "efficientnet_b4", "efficientnet_goldens.json")

B0 = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
      (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]
SMALL_STAGES = [(1, 3, 1, 32, 16, 1), (6, 5, 2, 16, 24, 2), (6, 3, 2, 24, 40, 2)]


# ---- golden values (as tests/models/efficientnet_golden_test.cpp's specOf) ------------------
def golden_spec(name, shape):
    """(offset, scale) of a variable by its torchvision name and C++ shape."""
    if name.endswith(".weight") and len(shape) == 4:  # conv [K,R,S,C/G]: variance 1/fan_in
        return 0.0, 2.0 * math.sqrt(3.0 / (shape[1] * shape[2] * shape[3]))
    if name.endswith(".weight") and len(shape) == 2:  # classifier [out, in]
        return 0.0, 2.0 * math.sqrt(3.0 / shape[1])
    if name.endswith(".weight") or name.endswith(".running_var"):  # norm gamma
        return 1.0, 0.5
    if name.endswith((".bias", ".running_mean")):
        return 0.0, 0.2
    raise ValueError(f"no golden spec for {name}")


def to_cpp_shape(t):
    s = tuple(t.shape)
    return (s[0], s[2], s[3], s[1]) if len(s) == 4 else s


def load_golden(model, dtype):
    """Every parameter and running statistic by name, generated in the C++ layout."""
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                continue
            shape = to_cpp_shape(t)
            off, scale = golden_spec(name, shape)
            a = gw.golden_tensor(name, int(np.prod(shape)), off, scale).reshape(shape)
            if a.ndim == 4:
                a = a.transpose(0, 3, 1, 2)  # [K,R,S,C] -> [K,C,R,S]
            t.copy_(torch.from_numpy(np.ascontiguousarray(a)))
    model.to(dtype)


def to_cpp_layout(a):
    return a.transpose(0, 2, 3, 1) if a.ndim == 4 else a


# ---- models --------------------------------------------------------------------------------
def make_model(cfg):
    expand_override = 4 if cfg["g16"] else 0
    settings = []
    for e, k, s, i, o, n in (B0 if cfg["stages"] == "b0" else SMALL_STAGES):
        e = expand_override if (expand_override and e != 1) else e
        settings.append(MBConvConfig(e, k, s, i, o, n, cfg["width"], cfg["depth"]))
    norm = partial(nn.GroupNorm, 4) if cfg["norm"] == "group" else None
    model = EfficientNet(settings, dropout=0.0, stochastic_depth_prob=0.0,
                         num_classes=cfg["classes"], norm_layer=norm)
    if cfg["g16"]:
        for m in model.modules():
            if isinstance(m, MBConv):
                for layer in m.block:
                    conv = layer[0] if isinstance(layer, nn.Sequential) else None
                    if isinstance(conv, nn.Conv2d) and conv.groups > 1:  # the depthwise conv
                        c = conv.in_channels
                        layer[0] = nn.Conv2d(c, c, conv.kernel_size, conv.stride, conv.padding,
                                             groups=max(1, c // 16), bias=False)
    return model


def images(cfg, n, dtype):
    x = gw.golden_images((n, cfg["input"], cfg["input"], 3))
    return torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(dtype)


def labels(cfg, n):
    return torch.from_numpy(gw.golden_labels(n, cfg["classes"]))


def train_step(cfg, n, dtype):
    model = make_model(cfg)
    load_golden(model, dtype)
    model.train()
    logits = model(images(cfg, n, dtype))
    loss = F.cross_entropy(logits, labels(cfg, n), label_smoothing=cfg["label_smoothing"])
    loss.backward()
    return {"logits": logits.detach().numpy(), "loss": loss.item(),
            "grads": {k: to_cpp_layout(p.grad.numpy().copy())
                      for k, p in model.named_parameters()},
            "running": {k: b.numpy().copy() for k, b in model.named_buffers()
                        if k.endswith(("running_mean", "running_var"))}}


def eval_logits(cfg, n, dtype):
    model = make_model(cfg)
    load_golden(model, dtype)
    model.eval()
    with torch.no_grad():
        return model(images(cfg, n, dtype)).numpy()


# ---- encoding ------------------------------------------------------------------------------
def enc(a):
    a = np.ascontiguousarray(np.asarray(a, dtype="<f4"))
    return {"shape": list(a.shape), "f32_b64": base64.b64encode(a.tobytes()).decode("ascii")}


def summary(a, ref32, head=256):
    a = np.asarray(a, dtype=np.float64).ravel()
    return {"count": int(a.size), "head": enc(a[:head].astype(np.float32)),
            "sum": float(a.sum()), "sum_abs": float(np.abs(a).sum()),
            "sum_sq": float((a * a).sum()), "f32_l2_rel": l2_rel(ref32, a)}


def l2_rel(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def rel_dev(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def train_case(cfg, n):
    r = train_step(cfg, n, torch.float64)
    r32 = train_step(cfg, n, torch.float32)
    return {"config": cfg, "batch": n, "reference": "torchvision EfficientNet, float64",
            "logits": enc(r["logits"]), "loss": r["loss"],
            "grads": {k: summary(g, r32["grads"][k]) for k, g in r["grads"].items()},
            "running": {k: enc(v) for k, v in r["running"].items()},
            "f32_dev": {"logits": rel_dev(r32["logits"], r["logits"]),
                        "loss": abs(r32["loss"] / r["loss"] - 1),
                        "grads_l2_max": max(l2_rel(r32["grads"][k], g)
                                            for k, g in r["grads"].items())}}


def b4_train_case(cfg, n, names):
    """Train-mode B4 at a small resolution: loss, logits and a sample of gradients."""
    r = train_step(cfg, n, torch.float64)
    r32 = train_step(cfg, n, torch.float32)
    return {"config": cfg, "batch": n, "reference": "torchvision efficientnet_b4, float64",
            "logits": enc(r["logits"]), "loss": r["loss"],
            "grads": {k: summary(r["grads"][k], r32["grads"][k]) for k in names},
            "f32_dev": {"logits": rel_dev(r32["logits"], r["logits"]),
                        "loss": abs(r32["loss"] / r["loss"] - 1),
                        "grads_l2_max": max(l2_rel(r32["grads"][k], r["grads"][k])
                                            for k in names)}}


def eval_case(cfg, n):
    e = eval_logits(cfg, n, torch.float64)
    e32 = eval_logits(cfg, n, torch.float32)
    return {"config": cfg, "batch": n, "reference": "torchvision EfficientNet eval, float64",
            "logits": enc(e), "f32_dev": {"logits": rel_dev(e32, e)}}


SMALL = {"stages": "small", "width": 0.5, "depth": 1.0, "input": 32, "classes": 10,
         "norm": "batch", "g16": False, "label_smoothing": 0.1}
B4 = {"stages": "b0", "width": 1.4, "depth": 1.8, "input": 64, "classes": 1000,
      "norm": "batch", "g16": False, "label_smoothing": 0.0}

B4_GRADS = ["features.0.0.weight", "features.0.1.weight", "features.1.0.block.0.0.weight",
            "features.1.0.block.1.fc1.weight", "features.2.0.block.1.0.weight",
            "features.3.2.block.2.fc2.bias", "features.4.3.block.1.0.weight",
            "features.6.7.block.0.0.weight", "features.7.1.block.3.1.weight",
            "features.8.0.weight", "classifier.1.weight", "classifier.1.bias"]


def main():
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    # torchvision's own efficientnet_b4 is the B4 under test: same modules and names.
    ref = torchvision.models.efficientnet_b4()
    ours = make_model(B4)
    assert [(k, tuple(v.shape)) for k, v in ref.state_dict().items()] == \
           [(k, tuple(v.shape)) for k, v in ours.state_dict().items()]
    assert sum(p.numel() for p in ref.parameters()) == 19341616
    out = {"format": "ipu-efficientnet-goldens/1",
           "generator": "scripts/goldens/make_efficientnet_goldens.py",
           "torch": torch.__version__, "torchvision": torchvision.__version__,
           "golden_weights": "models/resnet50/golden_weights.h (values), spec in the generator",
           "cases": {}}
    c = out["cases"]
    c["small"] = train_case(SMALL, 4)
    c["small_g16"] = train_case(dict(SMALL, g16=True), 4)
    c["small_gn"] = train_case(dict(SMALL, norm="group"), 4)
    c["b4_train"] = b4_train_case(B4, 2, B4_GRADS)
    c["g16_train"] = b4_train_case(dict(B4, g16=True), 2, B4_GRADS)
    c["b4_eval"] = eval_case(B4, 2)
    c["g16_eval"] = eval_case(dict(B4, g16=True), 2)
    c["b4_eval_380"] = eval_case(dict(B4, input=380), 1)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for name, case in c.items():
        print(name, "f32 vs f64:", json.dumps(case["f32_dev"]))


if __name__ == "__main__":
    main()
