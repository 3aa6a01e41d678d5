#!/usr/bin/python3
"""torchvision reference for datasets_bench: PIL decode + RandomResizedCrop(224) +
RandomHorizontalFlip + ToTensor + Normalize on one thread, over the same JPEGs held in memory.

    /usr/bin/python3 torchvision_pipeline.py --dir DIR [--repeats 5] [--transform train|eval]
Prints one JSON line.
"""
import argparse
import io
import json
import os
import statistics
import time

import torch
from PIL import Image
from torchvision import transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--transform", choices=["train", "eval"], default="train")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    files = sorted(
        os.path.join(r, f) for r, _, fs in os.walk(args.dir) for f in fs
        if f.lower().endswith((".jpeg", ".jpg")))
    blobs = [open(f, "rb").read() for f in files]
    if args.transform == "train":
        t = transforms.Compose([
            transforms.RandomResizedCrop(224),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ])
    else:
        t = transforms.Compose([
            transforms.Resize(256),
            transforms.CenterCrop(224),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ])
    rates = []
    checksum = 0.0
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for b in blobs:
            x = t(Image.open(io.BytesIO(b)).convert("RGB"))
            checksum += float(x[0, 0, 0])
        rates.append(len(blobs) / (time.perf_counter() - t0))
    print(json.dumps({
        "impl": "torchvision", "transform": args.transform, "threads": 1, "images": len(blobs),
        "repeats": args.repeats, "median_images_per_s": round(statistics.median(rates), 2),
        "runs": [round(r, 2) for r in rates], "torch": torch.__version__,
        "torchvision": __import__("torchvision").__version__, "checksum": round(checksum, 4)}))


if __name__ == "__main__":
    main()
