"""Deterministic golden tensors, bit-identical to models/resnet50/golden_weights.cpp.

Element i of tensor `name` (flat index in the C++ model's layout: OHWI convs, [in,out] dense):
    x = fmix32((fnv1a32(name) + i * 2654435761) mod 2^32)   (murmur3's finaliser)
    u = x / 2^32 - 0.5                      (exact in float64)

fmix32 decorrelates neighbouring elements: a bare Weyl sequence made the images of a batch
shifted copies of each other and the conv filters nearly collinear, so some batch-norm channels
had almost no variance and the float32 results were ill-conditioned.
    value = float32(offset + scale * u)     (float64 arithmetic, one cast)
"""
import math

import numpy as np

_GOLDEN = 2654435761


def fnv1a32(s: str) -> int:
    h = 2166136261
    for ch in s.encode("utf-8"):
        h = ((h ^ ch) * 16777619) & 0xFFFFFFFF
    return h


_M32 = np.uint64(0xFFFFFFFF)


def _fmix32(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(16))
    h = (h * np.uint64(0x85EBCA6B)) & _M32
    h = h ^ (h >> np.uint64(13))
    h = (h * np.uint64(0xC2B2AE35)) & _M32
    return h ^ (h >> np.uint64(16))


def _bits(name: str, count: int) -> np.ndarray:
    i = np.arange(count, dtype=np.uint64)
    # uint64 arithmetic wraps mod 2^64, which keeps the value right mod 2^32.
    return _fmix32((np.uint64(fnv1a32(name)) + i * np.uint64(_GOLDEN)) & _M32)


def golden_tensor(name: str, count: int, offset: float, scale: float) -> np.ndarray:
    u = _bits(name, count).astype(np.float64) / 4294967296.0 - 0.5
    return (offset + scale * u).astype(np.float32)


def golden_spec(name: str, shape) -> tuple:
    """(offset, scale) of a ResNet variable, as goldenSpecFor in C++."""
    if name.endswith("_weight"):
        if len(shape) == 4:
            fan_in = shape[1] * shape[2] * shape[3]
        elif len(shape) == 2:
            fan_in = shape[0]
        else:
            raise ValueError(f"unexpected weight rank for {name}")
        return 0.0, 2.0 * math.sqrt(3.0 / fan_in)
    if name.endswith("_bn3_gamma"):
        return 0.2, 0.1
    if name.endswith("_gamma") or name.endswith("_running_var"):
        return 1.0, 0.5
    if name.endswith(("_beta", "_bias", "_running_mean")):
        return 0.0, 0.2
    raise ValueError(f"no golden spec for {name}")


def golden_variable(name: str, shape) -> np.ndarray:
    """The golden value of a variable in the C++ layout, shaped."""
    offset, scale = golden_spec(name, shape)
    return golden_tensor(name, int(np.prod(shape)), offset, scale).reshape(shape)


def golden_images(shape) -> np.ndarray:
    """NHWC images, uniform [-1, 1)."""
    return golden_tensor("images", int(np.prod(shape)), 0.0, 2.0).reshape(shape)


def golden_labels(n: int, classes: int) -> np.ndarray:
    return (_bits("labels", n) % np.uint64(classes)).astype(np.int64)
