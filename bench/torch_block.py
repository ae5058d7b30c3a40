#!/usr/bin/python3
"""What addnorm.torch is worth inside a PyTorch model: training steps of a pre-LN transformer stack.

Usage: PYTHONPATH=build/release/python bench/torch_block.py [--threads 2] [--rounds 5] [--layers 4]
       [--dropout 0.1]

Two copies of one model (d_model 256, 4 heads, d_ff 1024, sequence 128, batch 16, dropout 0.1 by default,
f32, AdamW), the same weights:
  torch    every sub-layer as h = h + Dropout(F(LayerNorm(h))) with torch.nn.LayerNorm and
           torch.nn.Dropout;
  addnorm  the residual add, its dropout and the next sub-layer's LayerNorm fused in one
           addnorm.torch.AddNorm ((s, y) = AddNorm(h, F(y_prev))), the first LayerNorm
           addnorm.torch.LayerNorm; attention and feed-forward are the same torch modules.
Before timing, both run one step with dropout 0 on the same batch: their losses and gradients must
agree (to 1e-5 relative), or the script exits 1. Then alternated rounds of steps (forward,
cross-entropy on a random target, backward, AdamW), the median step time of each, and the ratio.
"""
import argparse
import copy
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import addnorm
import addnorm.torch as at


class FeedForward(torch.nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, d_ff), torch.nn.Linear(d_ff, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Attention(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class TorchStack(torch.nn.Module):
    """Pre-LN: h = h + Dropout(F(LayerNorm(h))) per sub-layer, a final LayerNorm."""

    def __init__(self, d, heads, d_ff, layers, p):
        super().__init__()
        self.sublayers = torch.nn.ModuleList()
        for _ in range(layers):
            self.sublayers.append(Attention(d, heads))
            self.sublayers.append(FeedForward(d, d_ff))
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(d) for _ in range(2 * layers + 1))
        self.drop = torch.nn.Dropout(p)

    def forward(self, h, step):
        for norm, sub in zip(self.norms, self.sublayers):
            h = h + self.drop(sub(norm(h)))
        return self.norms[-1](h)


class AddnormStack(torch.nn.Module):
    """The same model: the first LayerNorm alone, then per sub-layer (h, y) = AddNorm(h, F(y)),
    whose norm is the next sub-layer's (the last one's is the final LayerNorm)."""

    def __init__(self, ref, p):
        super().__init__()
        self.sublayers = copy.deepcopy(ref.sublayers)
        d = ref.norms[0].normalized_shape[0]
        self.first = at.LayerNorm(d)
        self.add_norms = torch.nn.ModuleList(at.AddNorm(d, p=p) for _ in ref.sublayers)
        with torch.no_grad():
            self.first.weight.copy_(ref.norms[0].weight)
            self.first.bias.copy_(ref.norms[0].bias)
            for an, norm in zip(self.add_norms, ref.norms[1:]):
                an.weight.copy_(norm.weight)
                an.bias.copy_(norm.bias)

    def forward(self, h, step):
        y = self.first(h)
        for i, (sub, an) in enumerate(zip(self.sublayers, self.add_norms)):
            # a new dropout stream per step and sub-layer: seed = step, offset = i * numel
            h, y = an(h, sub(y), seed=step, offset=i * h.numel())
        return y


def loss_of(model, x, target, step):
    return F.cross_entropy(model(x, step).reshape(-1, x.shape[-1]), target.reshape(-1))


def check_agreement(ref, x, target):
    """One step with dropout 0: same loss and gradients, or exit 1."""
    models = [copy.deepcopy(ref), AddnormStack(ref, 0.0)]
    models[0].drop.p = 0.0
    losses = []
    for m in models:
        m.train()
        loss = loss_of(m, x, target, 0)
        loss.backward()
        losses.append(float(loss))
    g_ref = torch.cat([p.grad.flatten() for p in models[0].sublayers.parameters()])
    g_ours = torch.cat([p.grad.flatten() for p in models[1].sublayers.parameters()])
    err = float((g_ref - g_ours).abs().max() / g_ref.abs().max())
    ok = abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[0]) and err <= 1e-5
    print(f"agreement at dropout 0: loss {losses[0]:.6f} (torch) vs {losses[1]:.6f} (addnorm), "
          f"sub-layer gradients max relative difference {err:.2e}: {'ok' if ok else 'FAILED'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="steps per round and model")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dropout", type=float, default=0.1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    addnorm.set_num_threads(args.threads)
    torch.manual_seed(0)
    d, heads, d_ff, seq, batch, p = 256, 4, 1024, 128, 16, args.dropout
    ref = TorchStack(d, heads, d_ff, args.layers, p)
    with torch.no_grad():  # norms that differ from one another, so that the agreement check sees which is which
        for norm in ref.norms:
            norm.weight.add_(0.1 * torch.randn(d))
            norm.bias.add_(0.1 * torch.randn(d))
    x = torch.randn(batch, seq, d)
    target = torch.randint(0, d, (batch, seq))
    print(f"threads {args.threads}, {args.layers} layers, d {d}, heads {heads}, d_ff {d_ff}, batch {batch} x {seq}, "
          f"dropout {p}; addnorm {addnorm.__version__} ({at.backend} backend, {addnorm.simd_target()}), "
          f"torch {torch.__version__}")
    if not check_agreement(ref, x, target):
        sys.exit(1)
    models = {"torch": ref, "addnorm": AddnormStack(ref, p)}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}
    times = {name: [] for name in models}
    step = 0
    for r in range(args.rounds + 1):
        order = list(models) if r % 2 == 0 else list(reversed(models))
        for name in order:
            m, opt = models[name], opts[name]
            m.train()
            ts = []
            for _ in range(args.steps):
                step += 1
                t = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss_of(m, x, target, step).backward()
                opt.step()
                ts.append(time.perf_counter() - t)
            if r > 0:  # round 0 warms up
                times[name].append(statistics.median(ts))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, t in med.items():
        print(f"{name:8s} {t * 1e3:.1f} ms/step (rounds: {', '.join(f'{v * 1e3:.1f}' for v in times[name])})")
    wins = sum(a < b for a, b in zip(times["addnorm"], times["torch"]))
    print(f"addnorm / torch step time {med['addnorm'] / med['torch']:.3f} (addnorm faster in {wins} of "
          f"{args.rounds} rounds)")


if __name__ == "__main__":
    main()
