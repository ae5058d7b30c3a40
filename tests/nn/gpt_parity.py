#!/usr/bin/python3
"""Parity of addnorm's GptModel with a small GPT-style model written here in PyTorch 1.13: token
embedding + learned positions, pre-LN blocks (causal multi-head self-attention, GELU feed-forward),
final LayerNorm, LM head tied to the embedding (and an untied case), cross-entropy with label
smoothing and an ignored target. The same weights and tokens go to both (exchanged as .npy); the
logits, the loss, every parameter gradient, and after five training steps (gradient clipping by
global norm, AdamW) the losses, gradient norms and every parameter must agree to a relative error
(max |a - b| / max |b| per tensor, with the floor below) of 1e-4 in f32 and 1e-10 in f64.
Usage: gpt_parity.py GPT_PARITY_RUN WORK_DIR. Exits non-zero on any mismatch."""
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

from parity_common import ADAM_EPS, BETAS, LR, MAX_NORM, STEPS, WD, rel, training_steps

B, T, V, MAXLEN, D, H, FF, L = 2, 6, 13, 8, 16, 4, 32, 2
EPS, SMOOTHING, IGNORE = 1e-5, 0.1, -100


def make_params(dtype, tied, seed):
    """addnorm's parameter names -> leaf tensors, random but well away from degenerate values."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, std=1.0, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)

    p = {'wte.weight': randn(V, D, std=0.3), 'wpe.weight': randn(MAXLEN, D, std=0.3)}
    for i in range(L):
        pre = f'blocks.layers.{i}.'
        for n in ('q', 'k', 'v', 'out'):
            p[pre + f'self_attn.{n}_proj.weight'] = randn(D, D, std=D ** -0.5)
            p[pre + f'self_attn.{n}_proj.bias'] = randn(D, std=0.1)
        p[pre + 'ffn.linear1.weight'] = randn(FF, D, std=D ** -0.5)
        p[pre + 'ffn.linear1.bias'] = randn(FF, std=0.1)
        p[pre + 'ffn.linear2.weight'] = randn(D, FF, std=FF ** -0.5)
        p[pre + 'ffn.linear2.bias'] = randn(D, std=0.1)
        for k in (1, 2):
            p[pre + f'norm{k}.weight'] = randn(D, std=0.1, mean=1.0)
            p[pre + f'norm{k}.bias'] = randn(D, std=0.1)
    p['blocks.norm.weight'] = randn(D, std=0.1, mean=1.0)
    p['blocks.norm.bias'] = randn(D, std=0.1)
    if not tied:
        p['lm_head.weight'] = randn(V, D, std=0.3)
    return {n: t.clone().requires_grad_(True) for n, t in p.items()}


def forward(p, ids, tied):
    x = p['wte.weight'][ids] + p['wpe.weight'][:T]                      # (B, T, D)
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    for i in range(L):
        pre = f'blocks.layers.{i}.'
        lin = lambda u, n: F.linear(u, p[pre + n + '.weight'], p[pre + n + '.bias'])
        u = F.layer_norm(x, (D,), p[pre + 'norm1.weight'], p[pre + 'norm1.bias'], EPS)
        q, k, v = (lin(u, f'self_attn.{n}_proj').view(B, T, H, D // H).transpose(1, 2) for n in 'qkv')
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)
        a = torch.softmax(s.masked_fill(causal, float('-inf')), dim=-1) @ v
        x = x + lin(a.transpose(1, 2).reshape(B, T, D), 'self_attn.out_proj')
        u = F.layer_norm(x, (D,), p[pre + 'norm2.weight'], p[pre + 'norm2.bias'], EPS)
        x = x + lin(F.gelu(lin(u, 'ffn.linear1'), approximate='tanh'), 'ffn.linear2')
    h = F.layer_norm(x, (D,), p['blocks.norm.weight'], p['blocks.norm.bias'], EPS)
    return h @ p['wte.weight' if tied else 'lm_head.weight'].T           # (B, T, V)


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(B * T, V), targets.reshape(-1), ignore_index=IGNORE,
                           label_smoothing=SMOOTHING)


def run_case(exe, work, dtype, tied, seed):
    tdt = torch.float32 if dtype == 'f32' else torch.float64
    name = f'gpt_{dtype}_{"tied" if tied else "untied"}'
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    p = make_params(tdt, tied, seed)
    g = torch.Generator().manual_seed(seed + 100)
    ids = torch.randint(0, V, (B, T), generator=g)
    targets = torch.roll(ids, -1, dims=1)
    targets[1, T - 1] = IGNORE
    for n, t in p.items():
        np.save(os.path.join(d, n + '.npy'), t.detach().to(torch.float64).numpy())
    np.save(os.path.join(d, 'ids.npy'), ids.reshape(-1).numpy().astype(np.int64))
    np.save(os.path.join(d, 'targets.npy'), targets.reshape(-1).numpy().astype(np.int64))
    with open(os.path.join(d, 'config.txt'), 'w') as f:
        f.write(f'dtype {dtype}\nvocab {V}\nmax_len {MAXLEN}\nlayers {L}\nd_model {D}\nheads {H}\nd_ff {FF}\n'
                f'activation gelu_tanh\neps {EPS}\ntied {int(tied)}\nlabel_smoothing {SMOOTHING}\n'
                f'ignore_index {IGNORE}\nbatch {B}\nsteps {STEPS}\nlr {LR}\nbeta1 {BETAS[0]}\nbeta2 {BETAS[1]}\n'
                f'adam_eps {ADAM_EPS}\nweight_decay {WD}\nmax_norm {MAX_NORM}\n')

    logits = forward(p, ids, tied)
    loss = loss_of(logits, targets)
    loss.backward()
    want = {'logits': logits.detach().reshape(B * T, V).to(torch.float64).numpy(), 'loss': [loss.item()]}
    for n, t in p.items():
        want['grad.' + n] = t.grad.to(torch.float64).numpy()
    # Five training steps from the same start (parity_common.training_steps).
    training_steps(p, lambda q: loss_of(forward(q, ids, tied), targets), want)

    proc = subprocess.run([exe, d], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f'FAIL {name}: gpt_parity_run exited {proc.returncode}: {proc.stderr.strip()}')
        return False
    tol = 1e-4 if dtype == 'f32' else 1e-10
    # Gradients exactly zero in exact arithmetic (k_proj.bias) are judged against 1e-3 of the
    # largest gradient of the case.
    floor = 1e-3 * max(float(np.max(np.abs(w))) for n, w in want.items() if n.startswith('grad.'))
    ok, worst = True, {}
    for n, w in want.items():
        got = np.load(os.path.join(d, n + '.npy'))
        err = rel(got, w, floor)
        group = n.split('.')[0] if '.' in n else n
        worst[group] = max(worst.get(group, 0.0), err)
        if not err <= tol:
            print(f'FAIL {name}: {n} relative error {err:.3e} > {tol:g}')
            ok = False
    summary = ', '.join(f'{k} {v:.1e}' for k, v in worst.items())
    print(f'{"ok  " if ok else "FAIL"} {name}: {len(want)} tensors; worst relative error: {summary}')
    return ok


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    ok = True
    for i, (dtype, tied) in enumerate((('f64', True), ('f32', True), ('f64', False), ('f32', False))):
        ok &= run_case(exe, work, dtype, tied, 10 + i)
    print('all cases agree' if ok else 'some cases differ')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
