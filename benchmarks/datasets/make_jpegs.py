#!/usr/bin/python3
"""Writes N photo-like synthetic JPEGs (default 200, 500x375, quality 90) into DIR: smooth
low-frequency colour fields, gradients, random shapes and sensor-like noise, so that file sizes
and decode cost resemble ImageNet photos (no downloads possible here).

    /usr/bin/python3 make_jpegs.py DIR [N]
"""
import os
import sys

import numpy as np
from PIL import Image, ImageDraw


def make(rng, w=500, h=375):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        field = (rng.uniform(60, 190) + rng.uniform(-60, 60) * (x / w)
                 + rng.uniform(-60, 60) * (y / h))
        for _ in range(6):
            fx, fy = rng.uniform(0.002, 0.05, 2)
            phase = rng.uniform(0, 6.28)
            field += rng.uniform(5, 30) * np.sin(fx * x * 6.28 + fy * y * 6.28 + phase)
        img[..., c] = field
    pil = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    d = ImageDraw.Draw(pil)
    for _ in range(rng.integers(5, 15)):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(10, 200), y0 + rng.integers(10, 200)
        col = tuple(int(v) for v in rng.integers(0, 256, 3))
        (d.ellipse if rng.random() < 0.5 else d.rectangle)([x0, y0, x1, y1], fill=col)
    arr = np.asarray(pil).astype(np.float32)
    arr += rng.normal(0, 6, arr.shape)  # texture/noise: keeps high-frequency DCT coefficients
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        make(rng).save(os.path.join(out, f"img_{i:04d}.JPEG"), "JPEG", quality=90)


if __name__ == "__main__":
    main()
