#!/usr/bin/python3
"""Writes the fuzz seed corpora under tests/fuzz/corpus/ from real files.

  /usr/bin/python3 tests/fuzz/make_seeds.py [FASHION_MNIST_DIR]

IDX: the first images/labels of Fashion-MNIST's t10k files (header count cut to match), plain and
gzip, plus a file cut inside the pixels. Images: Fashion-MNIST pictures encoded as baseline,
progressive, gray and restart-marker JPEGs and as PNGs (PIL), all small so one run is fast. The
folder-scan and --config seeds are written out here; the IR seeds are printGraph outputs (see
corpus/ir_text/README). Re-running rewrites the same files (deterministic encoders).
"""
import gzip
import io
import pathlib
import struct
import sys

from PIL import Image

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
FMNIST = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist")


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def gz(data):
    return gzip.compress(data, mtime=0)


images_raw = gzip.decompress((FMNIST / "t10k-images-idx3-ubyte.gz").read_bytes())
labels_raw = gzip.decompress((FMNIST / "t10k-labels-idx1-ubyte.gz").read_bytes())
magic, count, rows, cols = struct.unpack(">IIII", images_raw[:16])
assert magic == 0x803 and rows == cols == 28, "not Fashion-MNIST's t10k images"

def idx_images(n):
    return struct.pack(">IIII", 0x803, n, rows, cols) + images_raw[16:16 + n * rows * cols]

def idx_labels(n):
    return struct.pack(">II", 0x801, n) + labels_raw[8:8 + n]

write("idx", "images_2.idx3", idx_images(2))
write("idx", "images_2.idx3.gz", gz(idx_images(2)))
write("idx", "labels_8.idx1", idx_labels(8))
write("idx", "labels_8.idx1.gz", gz(idx_labels(8)))
write("idx", "images_truncated.idx3", idx_images(2)[:700])

def picture(i, size):
    img = Image.frombytes("L", (cols, rows), images_raw[16 + i * rows * cols:16 + (i + 1) * rows * cols])
    rgb = Image.merge("RGB", (img, img.transpose(Image.FLIP_LEFT_RIGHT), img.transpose(Image.FLIP_TOP_BOTTOM)))
    return rgb.resize(size, Image.BILINEAR)

def encode(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()

write("image_decode", "baseline_40x32.jpg", encode(picture(0, (40, 32)), "JPEG", quality=75))
write("image_decode", "progressive_48x40.jpg", encode(picture(1, (48, 40)), "JPEG", quality=60, progressive=True))
write("image_decode", "gray_28x28.jpg", encode(picture(2, (28, 28)).convert("L"), "JPEG", quality=75))
write("image_decode", "subsampling444_24x24.jpg", encode(picture(3, (24, 24)), "JPEG", quality=80, subsampling=0))
write("image_decode", "restart_32x32.jpg", encode(picture(4, (32, 32)), "JPEG", quality=70, restart_marker_blocks=1))
write("image_decode", "rgb_20x16.png", encode(picture(5, (20, 16)), "PNG"))
write("image_decode", "gray_28x28.png", encode(picture(6, (28, 28)).convert("L"), "PNG"))

# The folder scan: one entry per line ("dir/", "dir/file", "!name" = symlink to the previous).
write("image_folder", "two_classes.txt", "train/n01/a.JPEG\ntrain/n01/b.jpg\ntrain/n02/c.png\n"
      "val/n01/d.JPEG\nval/n02/e.JPEG\n")
write("image_folder", "empty_class.txt", "train/n01/a.JPEG\ntrain/n02/\ntrain/n03/.hidden.JPEG\n"
      "val/n01/x.JPEG\nval/n02/\n")
write("image_folder", "unknown_val_class.txt", "train/n01/a.JPEG\nval/n09/b.JPEG\nval/n01/c.txt\n")
write("image_folder", "symlink_loop.txt", "train/n01/a.JPEG\n!train/n03>train/n02\n"
      "!train/n02>train/n03\n!train/n09/b>train/n01/b.JPEG\n")
write("image_folder", "symlinks.txt", "train/n01/a.JPEG\n!train/n01/b.JPEG\ntrain/n02/\n!train/n03\n"
      "val/.n01/a.JPEG\n")

# --config: the benchmark's mini config and the kinds of keys the presets take.
write("config", "tta_mini.json", (HERE.parent.parent / "benchmarks" / "tta_mini.json").read_text())
write("config", "batch.json", '{"micro_batch_size": 8, "gradient_accumulation_steps": 2.0}\n')
write("config", "loss_scaling.json", '{"loss_scaling": {"mode": "dynamic", "scale": 65536}, '
      '"precision": "FP16.16"}\n')
write("config", "optimizer.json", '{"opt_name": "lars", "lars_opt_base_learning_rate": 0.1, "sgd_opt_momentum": 0.9, '
      '"lars_opt_weight_decay": 5e-05, "lars_opt_learning_rate_warmup_epochs": 2}\n')
write("config", "not_object.json", "[1, 2, {\"micro_batch_size\": -1e308}]\n")
print(f"seeds written under {CORPUS}")
