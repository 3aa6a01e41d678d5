#!/usr/bin/python3
"""Writes tests/fixtures/bert/bert_goldens.json: PyTorch reference results for the C++ BERT
pretraining graph (models/bert_large) on deterministic golden weights (golden_weights.py's
hash generator; the C++ test generates the same values by name and copies them into the
graph's variables by their TensorFlow names).

Run with Debian's interpreter (torch 1.13):
    /usr/bin/python3 scripts/goldens/make_bert_goldens.py [--full]

The reference below is an independent plain-torch BERT (the MLPerf TF reference's math: post-LN,
tanh GELU, LayerNorm eps 1e-12, additive -10000 mask, MLM over gathered positions with
sum(w * nll) / (sum(w) + 1e-5), NSP mean cross-entropy), written from the formulas, not from the
C++ code. It takes packed rows as Graphcore's packed format has them: a per-token sequence index
(0 = padding) gives a block-diagonal attention mask, positions restart per sequence, masked-LM
slots and [CLS] positions index the row's tokens.

Cases (computed in float64; `noise` = how far a float32 run of the same code is from it):
  packed    BertConfig::small(), 2 rows x 32 tokens holding 5 sequences (3 + 2), 8 masked slots
            and 3 [CLS] slots per row: losses, MLM / NSP logits, correct count, the MLM loss and
            accuracy averaged per sequence (the open division's), every gradient.
  unpacked  the same 5 sequences one per row (5 rows, 4 masked slots, 1 [CLS] slot): the same.
  lamb      the packed batch, 3 LAMB steps (clip to global norm 1, bias correction, decay and
            trust ratio but for LayerNorm / bias tensors): each step's loss, the norm of every
            parameter's total update, the final values of a few tensors.
  full      (--full) BERT-Large on one 16-token sequence: losses, NSP logits, the first 1024
            MLM logits of each slot and each slot's sum and sum of squares over the vocabulary.
"""
import argparse
import base64
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_weights as gw  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "bert", "bert_goldens.json")

SMALL = dict(layers=2, hidden=32, heads=4, ffn=128, vocab=64, max_positions=32, type_vocab=2)
LARGE = dict(layers=24, hidden=1024, heads=16, ffn=4096, vocab=30522, max_positions=512,
             type_vocab=2)
EPS = 1e-12
CLS, SEP, MASK, FIRST_WORD = 2, 3, 4, 5


# ---- parameters: TF names, TF layouts ([in, out] kernels) ----------------------------------
def parameter_specs(c):
    h, f, v = c["hidden"], c["ffn"], c["vocab"]
    specs = [("bert/embeddings/word_embeddings", (v, h)),
             ("bert/embeddings/position_embeddings", (c["max_positions"], h)),
             ("bert/embeddings/token_type_embeddings", (c["type_vocab"], h)),
             ("bert/embeddings/LayerNorm/gamma", (h,)), ("bert/embeddings/LayerNorm/beta", (h,))]
    for layer in range(c["layers"]):
        p = f"bert/encoder/layer_{layer}/"
        for qkv in ("query", "key", "value"):
            specs += [(f"{p}attention/self/{qkv}/kernel", (h, h)),
                      (f"{p}attention/self/{qkv}/bias", (h,))]
        specs += [(p + "attention/output/dense/kernel", (h, h)),
                  (p + "attention/output/dense/bias", (h,)),
                  (p + "attention/output/LayerNorm/gamma", (h,)),
                  (p + "attention/output/LayerNorm/beta", (h,)),
                  (p + "intermediate/dense/kernel", (h, f)), (p + "intermediate/dense/bias", (f,)),
                  (p + "output/dense/kernel", (f, h)), (p + "output/dense/bias", (h,)),
                  (p + "output/LayerNorm/gamma", (h,)), (p + "output/LayerNorm/beta", (h,))]
    specs += [("bert/pooler/dense/kernel", (h, h)), ("bert/pooler/dense/bias", (h,)),
              ("cls/predictions/output_bias", (v,)),
              ("cls/predictions/transform/dense/kernel", (h, h)),
              ("cls/predictions/transform/dense/bias", (h,)),
              ("cls/predictions/transform/LayerNorm/gamma", (h,)),
              ("cls/predictions/transform/LayerNorm/beta", (h,)),
              ("cls/seq_relationship/output_weights", (2, h)),
              ("cls/seq_relationship/output_bias", (2,))]
    return specs


def golden_spec(name, shape):
    """(offset, scale) of a BERT variable; the C++ test's bertGoldenSpec is the same table."""
    if name.endswith("/kernel"):
        return 0.0, 2.0 * math.sqrt(3.0 / shape[0])  # unit variance over fan_in = in
    if name.endswith("output_weights"):
        return 0.0, 2.0 * math.sqrt(3.0 / shape[1])
    if name.endswith("_embeddings"):
        return 0.0, 1.0
    if name.endswith("gamma"):
        return 1.0, 0.5
    if name.endswith(("beta", "bias")):
        return 0.0, 0.2
    raise ValueError(f"no golden spec for {name}")


def golden_weights(c, dtype, requires_grad=True):
    w = {}
    for name, shape in parameter_specs(c):
        off, sc = golden_spec(name, shape)
        v = gw.golden_tensor(name, int(np.prod(shape)), off, sc).reshape(shape)
        w[name] = torch.tensor(v, dtype=dtype, requires_grad=requires_grad)
    return w


# ---- the reference model ---------------------------------------------------------------------
def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def bert_pretraining(w, c, b, per_sequence=True, slot_weights=None):
    """b: dict of int64 tensors [rows, S] / [rows, P] / [rows, K] in the packed layout.
    per_sequence=False leaves out the open division's per-sequence averages (a loop in Python).
    slot_weights: the masked-LM slots' weights [rows * P] in place of 1 per masked token (the
    harness's per-sequence weights, 1 / masked tokens of the slot's sequence)."""
    rows, S = b["input_ids"].shape
    H, nh = c["hidden"], c["heads"]
    d = H // nh

    def ln(x, scope):
        return F.layer_norm(x, (H,), w[scope + "/gamma"], w[scope + "/beta"], EPS)

    def dense(x, scope):
        return x @ w[scope + "/kernel"] + w[scope + "/bias"]

    x = (w["bert/embeddings/word_embeddings"][b["input_ids"]] +
         w["bert/embeddings/position_embeddings"][b["positions"]] +
         w["bert/embeddings/token_type_embeddings"][b["segment_ids"]])
    x = ln(x, "bert/embeddings/LayerNorm")
    seq = b["sequence_index"]
    keep = (seq[:, :, None] == seq[:, None, :]) & (seq[:, None, :] > 0)  # [rows, Sq, Sk]
    additive = (1.0 - keep.to(x.dtype))[:, None] * -10000.0

    for layer in range(c["layers"]):
        p = f"bert/encoder/layer_{layer}/"

        def heads(name):
            return dense(x, p + "attention/self/" + name).view(rows, S, nh, d).transpose(1, 2)

        q, k, v = heads("query"), heads("key"), heads("value")
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + additive, dim=-1)
        ctx = (probs @ v).transpose(1, 2).reshape(rows, S, H)
        a = ln(dense(ctx, p + "attention/output/dense") + x, p + "attention/output/LayerNorm")
        f = dense(gelu_tanh(dense(a, p + "intermediate/dense")), p + "output/dense")
        x = ln(f + a, p + "output/LayerNorm")

    r = torch.arange(rows)[:, None]
    cls = x[r, b["cls_positions"]].reshape(-1, H)
    pooled = torch.tanh(dense(cls, "bert/pooler/dense"))
    nsp_logits = (pooled @ w["cls/seq_relationship/output_weights"].t() +
                  w["cls/seq_relationship/output_bias"])
    m = x[r, b["masked_positions"]].reshape(-1, H)
    m = ln(gelu_tanh(dense(m, "cls/predictions/transform/dense")),
           "cls/predictions/transform/LayerNorm")
    mlm_logits = m @ w["bert/embeddings/word_embeddings"].t() + w["cls/predictions/output_bias"]

    weights = (b["masked_sequence"].reshape(-1) > 0).to(x.dtype)
    if slot_weights is not None:
        weights = slot_weights.to(x.dtype)
    labels = b["masked_ids"].reshape(-1)
    nll = -torch.log_softmax(mlm_logits, dim=-1).gather(1, labels[:, None])[:, 0]
    mlm = (weights * nll).sum() / (weights.sum() + 1e-5)
    nw = b["nsp_weights"].reshape(-1).to(x.dtype)
    ce = F.cross_entropy(nsp_logits, b["nsp_labels"].reshape(-1), reduction="none")
    nsp = (nw * ce).sum() / nw.sum()
    hit = (mlm_logits.argmax(-1) == labels).to(x.dtype)
    correct = (hit * weights).sum()
    if not per_sequence:
        return dict(mlm_logits=mlm_logits, nsp_logits=nsp_logits, mlm_loss=mlm, nsp_loss=nsp,
                    loss=mlm + nsp, mlm_correct_count=correct, mlm_weight_sum=weights.sum())
    # The open division's averaging: each sequence's mean over its masked tokens, averaged over
    # the sequences (row, sequence index) that have any.
    seq_id = (torch.arange(rows)[:, None] * 1000 + b["masked_sequence"]).reshape(-1)
    per_seq_nll, per_seq_acc = [], []
    for s in sorted(set(seq_id[weights > 0].tolist())):
        sel = seq_id == s
        per_seq_nll.append(nll[sel].mean())
        per_seq_acc.append(hit[sel].mean())
    return dict(mlm_logits=mlm_logits, nsp_logits=nsp_logits, mlm_loss=mlm, nsp_loss=nsp,
                loss=mlm + nsp, mlm_correct_count=correct, mlm_weight_sum=weights.sum(),
                mlm_loss_per_sequence=torch.stack(per_seq_nll).mean(),
                mlm_accuracy_per_sequence=torch.stack(per_seq_acc).mean())


# ---- LAMB (the MLPerf reference form, BERT_FACTS section 1) --------------------------------
LAMB = dict(lrs=[2e-2, 1.5e-2, 1e-2], beta1=0.9, beta2=0.999, weight_decay=0.01, epsilon=1e-6,
            max_grad_norm=1.0)
TRACKED = ["bert/encoder/layer_0/attention/self/query/kernel",
           "bert/encoder/layer_1/output/LayerNorm/gamma", "cls/predictions/output_bias",
           "bert/embeddings/word_embeddings"]


def decays(name):
    return not any(k in name for k in ("LayerNorm", "layer_norm", "bias"))


def lamb_steps(c, batch, dtype):
    """Losses of each step and the weights after the last: clip_by_global_norm(g, 1.0), then
    m, v, bias correction, u = m^ / (sqrt(v^) + eps) + wd w, trust |w| / |u| (1 if either is
    0; 1 and no decay for LayerNorm and bias tensors), w -= lr trust u."""
    tb = {k: torch.tensor(v) for k, v in batch.items()}
    w = golden_weights(c, dtype)
    h = LAMB
    m = {n: torch.zeros_like(t) for n, t in w.items()}
    v = {n: torch.zeros_like(t) for n, t in w.items()}
    losses = []
    for step, lr in enumerate(h["lrs"], start=1):
        for t in w.values():
            t.grad = None
        loss = bert_pretraining(w, c, tb)["loss"]
        loss.backward()
        losses.append(float(loss))
        with torch.no_grad():
            norm = torch.sqrt(sum((t.grad ** 2).sum() for t in w.values()))
            clip = h["max_grad_norm"] / torch.clamp(norm, min=h["max_grad_norm"])
            for n, t in w.items():
                g = t.grad * clip
                m[n] = h["beta1"] * m[n] + (1 - h["beta1"]) * g
                v[n] = h["beta2"] * v[n] + (1 - h["beta2"]) * g * g
                mh = m[n] / (1 - h["beta1"] ** step)
                vh = v[n] / (1 - h["beta2"] ** step)
                u = mh / (torch.sqrt(vh) + h["epsilon"])
                ratio = 1.0
                if decays(n):
                    u = u + h["weight_decay"] * t
                    wn, un = torch.linalg.norm(t), torch.linalg.norm(u)
                    ratio = float(wn / un) if wn > 0 and un > 0 else 1.0
                t -= lr * ratio * u
    return losses, {n: t.detach().numpy().copy() for n, t in w.items()}


def lamb_case(c, batch):
    l64, w64 = lamb_steps(c, batch, torch.float64)
    l32, w32 = lamb_steps(c, batch, torch.float32)
    w0 = {n: t.detach().numpy() for n, t in golden_weights(c, torch.float64).items()}
    delta = {n: float(np.linalg.norm(w64[n] - w0[n])) for n in w64}
    delta32 = {n: float(np.linalg.norm(w32[n].astype(np.float64) - w0[n])) for n in w64}
    # The key biases' gradients are zero in exact arithmetic; in float32 their rounding noise
    # (~1e-8) meets LAMB's normalisation, m / (sqrt(v) + 1e-6), and moves them visibly.
    zero = sorted(n for n in delta if delta[n] < 1e-9)
    return {"hyper": LAMB, "step_losses": l64,
            "update_norms": delta, "zero_updates": zero,
            "tracked": {n: b64(w64[n]) for n in TRACKED},
            "noise": {"step_losses": max(abs(a - b) / b for a, b in zip(l32, l64)),
                      "update_norms": max(abs(delta32[n] - delta[n]) / delta[n]
                                          for n in delta if n not in zero),
                      "zero_updates_f32": max([delta32[n] for n in zero] + [0.0])}}


# ---- batches -----------------------------------------------------------------------------------
def make_sequences(c, rng, lengths):
    """Sequences [CLS] A [SEP] B [SEP] with ~15% masked tokens (positions within the sequence)."""
    out = []
    for n in lengths:
        ids = rng.randint(FIRST_WORD, c["vocab"], size=n)
        a_len = rng.randint(1, n - 3)
        ids[0], ids[a_len + 1], ids[n - 1] = CLS, SEP, SEP
        seg = np.zeros(n, np.int64)
        seg[a_len + 2:] = 1
        candidates = [i for i in range(n) if ids[i] not in (CLS, SEP)]
        k = max(1, int(round(0.15 * n)))
        masked = sorted(rng.choice(candidates, size=k, replace=False).tolist())
        labels = ids[masked].copy()
        ids[masked] = MASK
        out.append(dict(ids=ids, seg=seg, masked=masked, labels=labels,
                        nsp=int(rng.randint(0, 2))))
    return out


def pack(sequences, groups, S, P, K):
    """Rows of the packed layout: `groups` lists the sequences of each row."""
    rows = len(groups)
    b = {k: np.zeros((rows, n), np.int64) for k, n in
         [("input_ids", S), ("segment_ids", S), ("positions", S), ("sequence_index", S),
          ("masked_positions", P), ("masked_ids", P), ("masked_sequence", P),
          ("cls_positions", K), ("nsp_labels", K), ("nsp_weights", K)]}
    for r, group in enumerate(groups):
        at, slot = 0, 0
        for j, si in enumerate(group):
            s = sequences[si]
            n = len(s["ids"])
            b["input_ids"][r, at:at + n] = s["ids"]
            b["segment_ids"][r, at:at + n] = s["seg"]
            b["positions"][r, at:at + n] = np.arange(n)
            b["sequence_index"][r, at:at + n] = j + 1
            for pos, lab in zip(s["masked"], s["labels"]):
                b["masked_positions"][r, slot] = at + pos
                b["masked_ids"][r, slot] = lab
                b["masked_sequence"][r, slot] = j + 1
                slot += 1
            b["cls_positions"][r, j] = at
            b["nsp_labels"][r, j] = s["nsp"]
            b["nsp_weights"][r, j] = 1
            at += n
        assert at <= S and slot <= P
    return b


# ---- output ------------------------------------------------------------------------------------
def b64(a):
    a = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    return {"shape": list(a.shape), "f32_b64": base64.b64encode(a.tobytes()).decode("ascii")}


def run_case(c, batch, with_grads):
    tb = {k: torch.tensor(v) for k, v in batch.items()}
    results = {}
    for dtype in (torch.float64, torch.float32):
        w = golden_weights(c, dtype, with_grads)
        with torch.set_grad_enabled(with_grads):
            o = bert_pretraining(w, c, tb)
        grads = {}
        if with_grads:
            o["loss"].backward()
            grads = {n: t.grad.detach().numpy().copy() for n, t in w.items()}
        results[dtype] = ({k: v.detach().numpy().copy() for k, v in o.items()}, grads)
        del w, o  # the full model's float64 weights are 2.7 GB
    (o64, g64), (o32, g32) = results[torch.float64], results[torch.float32]

    def rel(a, b):
        return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))

    case = {"batch": {k: v.reshape(-1).tolist() for k, v in batch.items()},
            "rows": int(batch["input_ids"].shape[0]),
            "seq_length": int(batch["input_ids"].shape[1]),
            "masked_slots": int(batch["masked_positions"].shape[1]),
            "max_per_pack": int(batch["cls_positions"].shape[1]),
            "loss": float(o64["loss"]), "mlm_loss": float(o64["mlm_loss"]),
            "nsp_loss": float(o64["nsp_loss"]),
            "mlm_correct_count": float(o64["mlm_correct_count"]),
            "mlm_weight_sum": float(o64["mlm_weight_sum"]),
            "mlm_loss_per_sequence": float(o64["mlm_loss_per_sequence"]),
            "mlm_accuracy_per_sequence": float(o64["mlm_accuracy_per_sequence"]),
            "nsp_logits": b64(o64["nsp_logits"]),
            "noise": {"loss": abs(float(o32["loss"]) - float(o64["loss"])) / float(o64["loss"]),
                      "mlm_logits": rel(o32["mlm_logits"], o64["mlm_logits"]),
                      "nsp_logits": rel(o32["nsp_logits"], o64["nsp_logits"])}}
    logits = o64["mlm_logits"]
    if logits.shape[1] <= 1024:
        case["mlm_logits"] = b64(logits)
    else:  # the full vocabulary: the first 1024 logits of each slot and per-slot sums (KBs)
        case["mlm_logits_head"] = b64(logits[:, :1024])
        case["mlm_logits_sum"] = logits.sum(axis=1).tolist()
        case["mlm_logits_sumsq"] = (logits ** 2).sum(axis=1).tolist()
    if with_grads:
        case["grads"] = {n: b64(g) for n, g in g64.items()}
        # The key biases' gradients are zero (softmax is invariant to a per-query shift);
        # the test checks them in absolute terms.
        zero = sorted(n for n in g64 if np.max(np.abs(g64[n])) < 1e-12)
        case["zero_grads"] = zero
        case["noise"]["worst_grad"] = max(rel(g32[n], g64[n]) for n in g64 if n not in zero)
        case["noise"]["zero_grads_f32_abs"] = max(
            [float(np.max(np.abs(g32[n]))) for n in zero] + [0.0])
    return case


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="add the BERT-Large one-sequence case")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    rng = np.random.RandomState(29)
    c = SMALL
    seqs = make_sequences(c, rng, [14, 10, 7, 20, 9])
    packed = pack(seqs, [[0, 1, 2], [3, 4]], S=32, P=8, K=3)
    unpacked = pack(seqs, [[0], [1], [2], [3], [4]], S=32, P=4, K=1)
    out = {"generator": "scripts/goldens/make_bert_goldens.py", "torch": torch.__version__,
           "config": c, "cases": {"packed": run_case(c, packed, True),
                                  "unpacked": run_case(c, unpacked, True)},
           "lamb": lamb_case(c, packed)}
    if args.full:
        frng = np.random.RandomState(1024)
        fs = make_sequences(LARGE, frng, [16])
        out["full_config"] = LARGE
        out["cases"]["full"] = run_case(LARGE, pack(fs, [[0]], S=16, P=2, K=1), False)
    elif os.path.exists(OUT):  # keep a full case generated earlier
        with open(OUT) as f:
            old = json.load(f)
        if "full" in old.get("cases", {}):
            out["full_config"] = old["full_config"]
            out["cases"]["full"] = old["cases"]["full"]
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    for name, case in out["cases"].items():
        print(f"{name}: loss {case['loss']:.6f} noise {case['noise']}")
    print(f"lamb: losses {out['lamb']['step_losses']} noise {out['lamb']['noise']}")


if __name__ == "__main__":
    main()
