#!/usr/bin/python3
"""The peer of models_bench's BM_BertTrainStep: one BERT-Large pretraining step (forward +
backward + LAMB) in PyTorch at the full width (hidden 1024, 16 heads, FFN 4096, vocabulary
30,522, tied MLM decoder, NSP head), `--layers` encoder layers, `--batch` unpacked sequences of
`--seq` tokens (20 masked slots at 128, 76 at 512), 2 threads, warm-up 3 steps, median of the
timed steps. --bf16: the same step under CPU bf16 autocast (matmuls in bf16, f32 master weights
and optimizer), the peer of our bf16 policy.

The model is written as a performance engineer would write it for PyTorch 1.13 on a CPU:
nn.Linear (addmm: bias fused into the GEMM), batched attention matmuls, F.layer_norm,
F.gelu(approximate="tanh"), softmax over scores + additive mask. LAMB as the MLPerf reference
(and our lowering) has it: clip to global gradient norm 1.0, m / v with bias correction,
u = m^ / (sqrt(v^) + 1e-6) + 0.01 w, w -= lr * |w| / |u| * u, no decay and trust ratio 1 for
LayerNorm and bias tensors; written with torch._foreach_* ops (one kernel per op over all
tensors, as apex's multi-tensor LAMB does on GPUs).

Run it as compare_bert.sh does (jemalloc preloaded, see ../shared/docs/PEER.md):
    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 \
    MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1 OPENBLAS_CORETYPE=SkylakeX \
    /usr/bin/python3 benchmarks/models/pytorch_bert_step.py --seq 128 --batch 2 --layers 4
Prints one JSON line: {"seq", "batch", "layers", "median_s", "seq_per_s", "gflops", ...}.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import peer_step

H, HEADS, FFN, VOCAB, POSITIONS, TYPES = 1024, 16, 4096, 30522, 512, 2
EPS = 1e-12


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.ModuleList(nn.Linear(H, H) for _ in range(3))
        self.attn_out = nn.Linear(H, H)
        self.ln1 = nn.LayerNorm(H, eps=EPS)
        self.inter = nn.Linear(H, FFN)
        self.out = nn.Linear(FFN, H)
        self.ln2 = nn.LayerNorm(H, eps=EPS)

    def forward(self, x, mask):  # x [B, S, H], mask [B, 1, S, S] additive
        b, s, _ = x.shape
        d = H // HEADS
        q, k, v = (lin(x).view(b, s, HEADS, d).transpose(1, 2) for lin in self.qkv)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d)) + mask
        ctx = torch.matmul(torch.softmax(scores, dim=-1), v)
        ctx = ctx.transpose(1, 2).reshape(b, s, H)
        a = self.ln1(self.attn_out(ctx) + x)
        return self.ln2(self.out(F.gelu(self.inter(a), approximate="tanh")) + a)


class Bert(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.word = nn.Embedding(VOCAB, H)
        self.position = nn.Embedding(POSITIONS, H)
        self.token_type = nn.Embedding(TYPES, H)
        self.ln = nn.LayerNorm(H, eps=EPS)
        self.layers = nn.ModuleList(Layer() for _ in range(layers))
        self.pooler = nn.Linear(H, H)
        self.transform = nn.Linear(H, H)
        self.transform_ln = nn.LayerNorm(H, eps=EPS)
        self.output_bias = nn.Parameter(torch.zeros(VOCAB))
        self.nsp = nn.Linear(H, 2)
        for name, p in self.named_parameters():  # the reference's initialisation
            if p.ndim > 1:
                nn.init.trunc_normal_(p, std=0.02, a=-0.04, b=0.04)

    def forward(self, ids, segments, positions, mask, masked_rows, masked_ids, masked_w,
                nsp_labels):
        b, s = ids.shape
        x = self.ln(self.word(ids) + self.position(positions) + self.token_type(segments))
        for layer in self.layers:
            x = layer(x, mask)
        flat = x.reshape(b * s, H)
        pooled = torch.tanh(self.pooler(flat[torch.arange(b) * s]))
        nsp_loss = F.cross_entropy(self.nsp(pooled), nsp_labels)
        # .float(): torch 1.13's CPU autocast runs layer_norm in the input's type and refuses
        # a bf16 input with f32 parameters (the encoder's residual adds are f32 already).
        m = self.transform_ln(
            F.gelu(self.transform(flat[masked_rows]), approximate="tanh").float())
        logits = F.linear(m, self.word.weight, self.output_bias)
        nll = F.cross_entropy(logits.float(), masked_ids, reduction="none")
        return (nll * masked_w).sum() / (masked_w.sum() + 1e-5) + nsp_loss


class Lamb:
    """LAMB over all tensors at once (torch._foreach_*), MLPerf reference semantics."""

    def __init__(self, named, lr=1e-4, b1=0.9, b2=0.999, eps=1e-6, wd=0.01, max_norm=1.0):
        self.p = [p for _, p in named]
        self.decay = [not ("ln" in n or "bias" in n) for n, _ in named]
        self.m = [torch.zeros_like(p) for p in self.p]
        self.v = [torch.zeros_like(p) for p in self.p]
        self.lr, self.b1, self.b2, self.eps, self.wd, self.max_norm = lr, b1, b2, eps, wd, max_norm
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        g = [p.grad for p in self.p]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(g)))
        clip = (self.max_norm / torch.clamp(norm, min=self.max_norm)).item()
        torch._foreach_mul_(g, clip)
        torch._foreach_mul_(self.m, self.b1)
        torch._foreach_add_(self.m, g, alpha=1 - self.b1)
        torch._foreach_mul_(self.v, self.b2)
        torch._foreach_addcmul_(self.v, g, g, value=1 - self.b2)
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        denom = torch._foreach_sqrt(self.v)
        torch._foreach_div_(denom, math.sqrt(c2))
        torch._foreach_add_(denom, self.eps)
        u = torch._foreach_div(self.m, denom)
        torch._foreach_div_(u, c1)
        decayed = [i for i, d in enumerate(self.decay) if d]
        torch._foreach_add_([u[i] for i in decayed], [self.p[i] for i in decayed], alpha=self.wd)
        wn = torch._foreach_norm([self.p[i] for i in decayed])
        un = torch._foreach_norm([u[i] for i in decayed])
        rate = [-self.lr] * len(self.p)
        for i, a, b in zip(decayed, torch.stack(wn).tolist(), torch.stack(un).tolist()):
            rate[i] = -self.lr * (a / b if a > 0 and b > 0 else 1.0)
        torch._foreach_mul_(u, rate)
        torch._foreach_add_(self.p, u)


def main():
    ap = peer_step.parser(__doc__.splitlines()[0], steps=5)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()

    peer_step.setup(args)
    model = Bert(args.layers)
    model.train()
    opt = Lamb(list(model.named_parameters()))
    b, s = args.batch, args.seq
    p = 76 if s >= 512 else 20
    # The same batch as models_bench's bertBenchBatch (one unpacked sequence per row).
    ids = torch.tensor([[5 + (r * 7919 + t * 104729) % (VOCAB - 5) for t in range(s)]
                        for r in range(b)])
    segments = torch.tensor([[0 if t < s // 2 else 1 for t in range(s)] for _ in range(b)])
    positions = torch.arange(s).repeat(b, 1)
    mask = torch.zeros(b, 1, s, s)
    masked_rows = torch.tensor([r * s + 1 + q * (s - 1) // p for r in range(b) for q in range(p)])
    masked_ids = torch.tensor([5 + (r * 31 + q * 577) % (VOCAB - 5) for r in range(b)
                               for q in range(p)])
    masked_w = torch.ones(b * p)
    nsp_labels = torch.tensor([r % 2 for r in range(b)])

    def step():
        for q in model.parameters():
            q.grad = None
        with peer_step.autocast(args):
            loss = model(ids, segments, positions, mask, masked_rows, masked_ids, masked_w,
                         nsp_labels)
        loss.backward()
        opt.step()
        return loss.item()

    timing = peer_step.time_steps(step, args)
    med = timing["median_s"]
    # 3 x forward matmul flops (2 per MAC): encoder, pooler, MLM transform + decoder, NSP.
    tokens = b * s
    macs = args.layers * (tokens * (4 * H * H + 2 * H * FFN) + 2 * b * HEADS * s * s * (H // HEADS))
    macs += b * H * H + b * p * (H * H + H * VOCAB) + b * 2 * H
    peer_step.report(args, timing, seq=s, batch=b, layers=args.layers, seq_per_s=b / med,
                     gflops=6 * macs / med / 1e9)


if __name__ == "__main__":
    main()
