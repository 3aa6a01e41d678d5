#!/usr/bin/python3
"""PyTorch reference of run_benchmark's BERT mini run, for the convergence parity check
(benchmarks/models/bert_convergence_parity.sh): the same model, data order and hyperparameters,
trained until the masked-LM accuracy (per token, the closed division's) reaches the target.

The model is the plain-torch BERT of scripts/goldens/make_bert_goldens.py (written from the
reference's formulas, not from the C++ code): post-LN, tanh GELU, LayerNorm eps 1e-12, additive
-10000 block-diagonal mask of packed rows, MLM over the gathered slots with
sum(w nll) / (sum(w) + 1e-5), NSP mean cross-entropy; initialised as the reference
(truncated normal 0.02 within two standard deviations, biases and beta 0, gamma 1; its own
draws for a seed, not the C++ values), or with --shared-init run_benchmark's own initial
weights, which bert_training_stream --init-weights wrote next to the records. The optimizer is the reference's LAMB
(BERT_FACTS section 1: bias-corrected moments, decay and trust ratio but for LayerNorm and bias
tensors, optional clip to the global norm) with the reference's schedule (linear warm-up from
start_warmup_step, polynomial decay of power 1 counted from step 0). The data are the records
bert_training_stream wrote: run_benchmark's training order for the seed, and its evaluation set.
An evaluation runs after every `--eval-interval` samples, as run_benchmark's mini cadence.
--per-sequence averages the masked-LM loss and accuracy per sequence as run_benchmark's open
division does (each slot weighted 1 / masked tokens of its sequence; models/bert_large/bert.h).

Prints one JSON line: the accuracy after each evaluation and the samples at which the target
was first reached (null when it was not within the budget).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "goldens"))
from make_bert_goldens import bert_pretraining, decays, parameter_specs  # noqa: E402


def load(stream, name, layout):
    S, P, K = layout["seq_length"], layout["masked_slots"], layout["max_per_pack"]
    widths = [("input_ids", S), ("sequence_index", S), ("segment_ids", S), ("positions", S),
              ("masked_positions", P), ("masked_ids", P), ("masked_sequence", P),
              ("cls_positions", K), ("nsp_labels", K), ("nsp_weights", K)]
    rows = np.fromfile(os.path.join(stream, name), dtype=np.int32)
    rows = rows.reshape(-1, sum(w for _, w in widths))
    out, at = {}, 0
    for field, w in widths:
        out[field] = torch.from_numpy(rows[:, at:at + w].astype(np.int64))
        at += w
    return out


def init_weights(c, seed):
    torch.manual_seed(seed)
    w = {}
    for name, shape in parameter_specs(c):
        t = torch.empty(shape, dtype=torch.float32)
        if name.endswith(("_embeddings", "/kernel", "output_weights")):
            torch.nn.init.trunc_normal_(t, std=0.02, a=-0.04, b=0.04)
        elif name.endswith("gamma"):
            t.fill_(1.0)
        else:
            t.zero_()
        w[name] = t.requires_grad_(True)
    return w


def load_init(stream, layout, c):
    """run_benchmark's initial weights (bert_training_stream --init-weights), by name."""
    if "weights" not in layout:
        sys.exit(f"--shared-init: {stream}/layout.json has no weights; write the stream with "
                 "bert_training_stream --init-weights")
    model = layout["model"]
    for k in ("layers", "hidden", "heads", "ffn", "vocab"):
        if model[k] != c[k]:
            sys.exit(f"--shared-init: the stream's weights are for {k} {model[k]}, the model's "
                     f"is {c[k]}; pass --{k} {model[k]} or rewrite the stream")
    flat = np.fromfile(os.path.join(stream, "init_weights.f32"), dtype=np.float32)
    specs = dict(parameter_specs(c))
    w, at = {}, 0
    for name, shape in layout["weights"]:
        if tuple(shape) != tuple(specs[name]):
            sys.exit(f"--shared-init: {name} has shape {shape} in the stream, {specs[name]} here")
        n = int(np.prod(shape))
        w[name] = torch.from_numpy(flat[at:at + n].reshape(shape).copy()).requires_grad_(True)
        at += n
    if at != flat.size or set(w) != set(specs):
        sys.exit(f"--shared-init: init_weights.f32 holds {flat.size} values for {len(w)} tensors, "
                 f"the model {at} for {len(specs)}")
    return w


def slot_weights(b, per_sequence):
    """Per sequence: 1 / masked tokens of the slot's sequence (0 for unused slots)."""
    seq = b["masked_sequence"]
    if not per_sequence:
        return None
    same = (seq[:, :, None] == seq[:, None, :]) & (seq[:, None, :] > 0)
    count = same.sum(-1).to(torch.float32)
    return torch.where(seq > 0, 1.0 / count.clamp(min=1), torch.zeros_like(count)).reshape(-1)


def learning_rate(a, step):
    if a.warmup > 0 and step - a.start_warmup < a.warmup:
        return a.lr * (step - a.start_warmup) / a.warmup
    return a.lr * (1.0 - min(step / max(1, a.steps), 1.0))


def lamb_step(a, w, m, v, step, lr):
    with torch.no_grad():
        clip = 1.0
        if a.max_grad_norm > 0:
            norm = torch.sqrt(sum((t.grad ** 2).sum() for t in w.values()))
            clip = a.max_grad_norm / torch.clamp(norm, min=a.max_grad_norm)
        for n, t in w.items():
            g = t.grad * clip
            m[n].mul_(a.beta1).add_(g, alpha=1 - a.beta1)
            v[n].mul_(a.beta2).addcmul_(g, g, value=1 - a.beta2)
            mh = m[n] / (1 - a.beta1 ** step)
            vh = v[n] / (1 - a.beta2 ** step)
            u = mh / (torch.sqrt(vh) + a.epsilon)
            ratio = 1.0
            if decays(n):
                u = u + a.weight_decay * t
                wn, un = torch.linalg.norm(t), torch.linalg.norm(u)
                ratio = float(wn / un) if wn > 0 and un > 0 else 1.0
            t -= lr * ratio * u


def evaluate(w, c, data, batch, per_sequence):
    correct = total = 0.0
    with torch.no_grad():
        n = data["input_ids"].shape[0]
        for i in range(0, n, batch):
            b = {k: t[i:i + batch] for k, t in data.items()}
            r = bert_pretraining(w, c, b, per_sequence=False,
                                 slot_weights=slot_weights(b, per_sequence))
            correct += float(r["mlm_correct_count"])
            total += float(r["mlm_weight_sum"])
    return correct / total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stream", required=True, help="bert_training_stream's output folder")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--layers", type=int, default=24)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=128)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--steps", type=int, required=True, help="opt_learning_rate_training_steps")
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--start-warmup", type=int, default=0)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.999)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--epsilon", type=float, default=1e-6)
    p.add_argument("--max-grad-norm", type=float, default=0.0)
    p.add_argument("--eval-interval", type=int, required=True, help="samples")
    p.add_argument("--target", type=float, required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--per-sequence", action="store_true",
                   help="masked-LM loss and accuracy per sequence (run_benchmark's open division)")
    p.add_argument("--shared-init", action="store_true",
                   help="start from run_benchmark's initial weights written into the stream")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    layout = json.load(open(os.path.join(a.stream, "layout.json")))
    c = dict(layers=a.layers, hidden=a.hidden, heads=a.heads, ffn=a.ffn, vocab=a.vocab,
             max_positions=layout["seq_length"], type_vocab=2)
    train, ev = load(a.stream, "train.i32", layout), load(a.stream, "eval.i32", layout)
    budget = min(a.steps, train["input_ids"].shape[0] // a.global_batch)
    w = load_init(a.stream, layout, c) if a.shared_init else init_weights(c, a.seed)
    m = {n: torch.zeros_like(t) for n, t in w.items()}
    v = {n: torch.zeros_like(t) for n, t in w.items()}
    curve, reached, start = [], None, time.time()
    for step in range(budget):
        b = {k: t[step * a.global_batch:(step + 1) * a.global_batch] for k, t in train.items()}
        for t in w.values():
            t.grad = None
        loss = bert_pretraining(w, c, b, per_sequence=False,
                                slot_weights=slot_weights(b, a.per_sequence))["loss"]
        loss.backward()
        lamb_step(a, w, m, v, step + 1, learning_rate(a, step))
        samples = (step + 1) * a.global_batch
        if samples % a.eval_interval == 0 or step + 1 == budget:
            acc = evaluate(w, c, ev, 64, a.per_sequence)
            curve.append([samples, round(acc, 5), round(float(loss), 4)])
            print(f"samples {samples} accuracy {acc:.4f} loss {float(loss):.4f}", file=sys.stderr)
            if acc >= a.target:
                reached = samples
                break
    print(json.dumps({"seed": a.seed, "reached_at": reached, "target": a.target, "curve": curve,
                      "seconds": round(time.time() - start, 1)}))


if __name__ == "__main__":
    main()
