#!/usr/bin/python3
"""Parity of addnorm's Seq2SeqModel with the same encoder-decoder transformer written here in
PyTorch 1.13, functionally (F.linear, F.layer_norm, softmax attention): one token embedding shared
by source and target, scaled by sqrt(d) (one case without the scale), sinusoidal positions, an
encoder stack (self-attention with a source key-padding mask, feed-forward) and a decoder stack
(causal self-attention, cross-attention to the encoder's output under the same mask,
feed-forward), post-LN (Vaswani) or pre-LN (with the final norm of both stacks), ReLU or GELU,
output projection tied to the embedding or untied, cross-entropy with label smoothing and ignored
targets, dropout off. The same weights and tokens go to both (exchanged as .npy); the parameter
names must be the same on both sides; the logits, the loss, every parameter gradient, and after
five training steps (gradient clipping by global norm, AdamW) the losses, gradient norms and every
parameter must agree to a relative error (max |a - b| / max |b| per tensor, with the floor below)
of 1e-4 in f32 and 1e-10 in f64.
Usage: seq2seq_parity.py SEQ2SEQ_PARITY_RUN WORK_DIR. Exits non-zero on any mismatch."""
import math
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

from parity_common import ADAM_EPS, BETAS, LR, MAX_NORM, STEPS, WD, rel, training_steps

B, S, T, V, D, H, FF, NE, ND = 2, 5, 6, 13, 16, 4, 32, 2, 2
EPS, SMOOTHING, IGNORE = 1e-5, 0.1, -100

# name, placement, activation, tied, scale_embedding
CASES = (
    ('post_relu_tied', 'post', 'relu', True, True),
    ('pre_gelu_untied', 'pre', 'gelu', False, True),
    ('post_gelu_untied_noscale', 'post', 'gelu', False, False),
    ('pre_relu_tied', 'pre', 'relu', True, True),
)


def make_params(dtype, placement, tied, seed):
    """addnorm's parameter names -> leaf tensors, random but well away from degenerate values."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, std=1.0, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)

    def attention(pre):
        for n in ('q', 'k', 'v', 'out'):
            p[pre + f'{n}_proj.weight'] = randn(D, D, std=D ** -0.5)
            p[pre + f'{n}_proj.bias'] = randn(D, std=0.1)

    def ffn_and_norms(pre, norms):
        p[pre + 'ffn.linear1.weight'] = randn(FF, D, std=D ** -0.5)
        p[pre + 'ffn.linear1.bias'] = randn(FF, std=0.1)
        p[pre + 'ffn.linear2.weight'] = randn(D, FF, std=FF ** -0.5)
        p[pre + 'ffn.linear2.bias'] = randn(D, std=0.1)
        for k in range(1, norms + 1):
            p[pre + f'norm{k}.weight'] = randn(D, std=0.1, mean=1.0)
            p[pre + f'norm{k}.bias'] = randn(D, std=0.1)

    p = {'embed.weight': randn(V, D, std=0.3)}
    for i in range(NE):
        attention(f'encoder.layers.{i}.self_attn.')
        ffn_and_norms(f'encoder.layers.{i}.', 2)
    for i in range(ND):
        attention(f'decoder.layers.{i}.self_attn.')
        attention(f'decoder.layers.{i}.cross_attn.')
        ffn_and_norms(f'decoder.layers.{i}.', 3)
    if placement == 'pre':
        for stack in ('encoder', 'decoder'):
            p[f'{stack}.norm.weight'] = randn(D, std=0.1, mean=1.0)
            p[f'{stack}.norm.bias'] = randn(D, std=0.1)
    if not tied:
        p['out_proj.weight'] = randn(V, D, std=0.3)
    return {n: t.clone().requires_grad_(True) for n, t in p.items()}


def sinusoid(length, dtype):
    """pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(the same), computed in f64."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    i2 = (torch.arange(D) - torch.arange(D) % 2).to(torch.float64)[None, :]
    angle = pos / torch.pow(10000.0, i2 / D)
    pe = torch.where(torch.arange(D)[None, :] % 2 == 0, torch.sin(angle), torch.cos(angle))
    return pe.to(dtype)


def forward(p, src, src_valid, tgt, case):
    _, placement, activation, tied, scale_embedding = case
    act = F.relu if activation == 'relu' else F.gelu
    scale = math.sqrt(D) if scale_embedding else 1.0
    dtype = p['embed.weight'].dtype

    def lin(u, n):
        return F.linear(u, p[n + '.weight'], p.get(n + '.bias'))

    def norm(u, n):
        return F.layer_norm(u, (D,), p[n + '.weight'], p[n + '.bias'], EPS)

    def attention(pre, xq, xkv, causal, key_valid):
        tq, tk = xq.shape[1], xkv.shape[1]
        q = lin(xq, pre + 'q_proj').view(B, tq, H, D // H).transpose(1, 2)
        k = lin(xkv, pre + 'k_proj').view(B, tk, H, D // H).transpose(1, 2)
        v = lin(xkv, pre + 'v_proj').view(B, tk, H, D // H).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(D // H)                 # (B, H, tq, tk)
        masked = torch.zeros(B, 1, tq, tk, dtype=torch.bool)
        if causal:
            masked = masked | torch.ones(tq, tk, dtype=torch.bool).triu(1)
        if key_valid is not None:
            masked = masked | ~key_valid[:, None, None, :]
        a = torch.softmax(s.masked_fill(masked, float('-inf')), dim=-1) @ v
        return lin(a.transpose(1, 2).reshape(B, tq, D), pre + 'out_proj')

    def box(x, norm_name, f):
        if placement == 'post':
            return norm(x + f(x), norm_name)                                # x = LN(x + F(x))
        return x + f(norm(x, norm_name))                                    # x = x + F(LN(x))

    def ffn(pre):
        return lambda u: lin(act(lin(u, pre + 'ffn.linear1')), pre + 'ffn.linear2')

    x = p['embed.weight'][src] * scale + sinusoid(S, dtype)                 # (B, S, D)
    for i in range(NE):
        pre = f'encoder.layers.{i}.'
        x = box(x, pre + 'norm1', lambda u: attention(pre + 'self_attn.', u, u, False, src_valid))
        x = box(x, pre + 'norm2', ffn(pre))
    mem = norm(x, 'encoder.norm') if placement == 'pre' else x
    y = p['embed.weight'][tgt] * scale + sinusoid(T, dtype)                 # (B, T, D)
    for i in range(ND):
        pre = f'decoder.layers.{i}.'
        y = box(y, pre + 'norm1', lambda u: attention(pre + 'self_attn.', u, u, True, None))
        y = box(y, pre + 'norm2', lambda u: attention(pre + 'cross_attn.', u, mem, False, src_valid))
        y = box(y, pre + 'norm3', ffn(pre))
    if placement == 'pre':
        y = norm(y, 'decoder.norm')
    return y @ p['embed.weight' if tied else 'out_proj.weight'].T          # (B, T, V)


def loss_of(logits, targets):
    return F.cross_entropy(logits.reshape(B * T, V), targets.reshape(-1), ignore_index=IGNORE,
                           label_smoothing=SMOOTHING)


def run_case(exe, work, dtype, case, seed):
    tdt = torch.float32 if dtype == 'f32' else torch.float64
    cname, placement, activation, tied, scale_embedding = case
    name = f'seq2seq_{dtype}_{cname}'
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    p = make_params(tdt, placement, tied, seed)
    g = torch.Generator().manual_seed(seed + 100)
    src = torch.randint(0, V, (B, S), generator=g)
    src_valid = torch.ones(B, S, dtype=torch.bool)
    src_valid[1, S - 2:] = False          # the second source is 3 tokens long, then padding
    tgt = torch.randint(0, V, (B, T), generator=g)
    targets = torch.roll(tgt, -1, dims=1)
    targets[0, 2] = IGNORE
    targets[1, T - 1] = IGNORE
    for n, t in p.items():
        np.save(os.path.join(d, n + '.npy'), t.detach().to(torch.float64).numpy())
    for n, t in (('src', src), ('src_valid', src_valid), ('tgt', tgt), ('targets', targets)):
        np.save(os.path.join(d, n + '.npy'), t.reshape(-1).numpy().astype(np.int64))
    with open(os.path.join(d, 'config.txt'), 'w') as f:
        f.write(f'dtype {dtype}\nvocab {V}\nencoder_layers {NE}\ndecoder_layers {ND}\nd_model {D}\nheads {H}\n'
                f'd_ff {FF}\nactivation {activation}\nplacement {placement}\neps {EPS}\ntied {int(tied)}\n'
                f'scale_embedding {int(scale_embedding)}\nlabel_smoothing {SMOOTHING}\n'
                f'ignore_index {IGNORE}\nbatch {B}\nsteps {STEPS}\nlr {LR}\nbeta1 {BETAS[0]}\nbeta2 {BETAS[1]}\n'
                f'adam_eps {ADAM_EPS}\nweight_decay {WD}\nmax_norm {MAX_NORM}\n')

    logits = forward(p, src, src_valid, tgt, case)
    loss = loss_of(logits, targets)
    loss.backward()
    want = {'logits': logits.detach().reshape(B * T, V).to(torch.float64).numpy(), 'loss': [loss.item()]}
    for n, t in p.items():  # (a parameter the model does not use has no grad: zero)
        want['grad.' + n] = (t.grad if t.grad is not None else torch.zeros_like(t)).to(torch.float64).numpy()
    # Five training steps from the same start (parity_common.training_steps).
    training_steps(p, lambda q: loss_of(forward(q, src, src_valid, tgt, case), targets), want)

    proc = subprocess.run([exe, d], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f'FAIL {name}: seq2seq_parity_run exited {proc.returncode}: {proc.stderr.strip()}')
        return False
    ok = True
    # The parameter names must be the same on both sides (the C++ side also fails on a name that
    # has no .npy file here).
    with open(os.path.join(d, 'names.txt')) as f:
        cpp_names = [line.strip() for line in f if line.strip()]
    only_cpp = sorted(set(cpp_names) - set(p))
    only_torch = sorted(set(p) - set(cpp_names))
    if only_cpp or only_torch or len(cpp_names) != len(set(cpp_names)):
        print(f'FAIL {name}: parameter names differ: only in C++ {only_cpp}, only here {only_torch}, '
              f'{len(cpp_names) - len(set(cpp_names))} duplicated in C++')
        ok = False
    tol = 1e-4 if dtype == 'f32' else 1e-10
    # Gradients exactly zero in exact arithmetic (k_proj.bias) are judged against 1e-3 of the
    # largest gradient of the case; the summary lists them apart as grad0.
    floor = 1e-3 * max(float(np.max(np.abs(w))) for n, w in want.items() if n.startswith('grad.'))
    worst = {}
    for n, w in want.items():
        path = os.path.join(d, n + '.npy')
        if not os.path.exists(path):
            print(f'FAIL {name}: seq2seq_parity_run wrote no {n}.npy')
            ok = False
            continue
        err = rel(np.load(path), w, floor)
        group = n.split('.')[0] if '.' in n else n
        if n.startswith('grad.') and n.endswith('k_proj.bias'):
            group = 'grad0'  # zero in exact arithmetic: rounding noise against the floor
        if group not in worst or err > worst[group][0]:
            worst[group] = (err, n[len(group) + 1:])
        if not err <= tol:
            print(f'FAIL {name}: {n} relative error {err:.3e} > {tol:g}')
            ok = False
    summary = ', '.join(f'{k} {e:.1e}' + (f' ({t})' if t and k != 'grad0' else '') for k, (e, t) in worst.items())
    print(f'{"ok  " if ok else "FAIL"} {name}: {len(p)} parameters, {len(want)} tensors; '
          f'worst relative error: {summary}')
    return ok


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    ok = True
    seed = 20
    for case in CASES:
        for dtype in ('f64', 'f32'):
            ok &= run_case(exe, work, dtype, case, seed)
            seed += 1
    print('all cases agree' if ok else 'some cases differ')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
