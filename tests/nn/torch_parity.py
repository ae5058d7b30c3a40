#!/usr/bin/python3
"""Parity of addnorm's EncoderLayer / DecoderLayer with PyTorch's nn.TransformerEncoderLayer /
nn.TransformerDecoderLayer: the same weights and inputs, loss = sum(y * r); outputs, input
gradients and every parameter gradient must agree to a relative error (max |a - b| / max |b| per
tensor, see the floor below) of 1e-4 in f32 and 1e-10 in f64. Cases: norm_first False and True, ReLU and GELU, key
padding masks, causal masks. Usage: torch_parity.py PARITY_RUN WORK_DIR. Exits non-zero on any
mismatch."""
import os
import subprocess
import sys

import numpy as np
import torch

B, T, S, D, H, FF = 2, 5, 4, 16, 4, 24


def save(d, manifest, name, t):
    a = np.ascontiguousarray(t.detach().to(torch.float64).numpy())
    a.tofile(os.path.join(d, name + '.bin'))
    manifest.append(name + ' ' + ' '.join(str(s) for s in a.shape))


def split_in_proj(prefix, attn, out):
    w, b = attn.in_proj_weight, attn.in_proj_bias
    for i, n in enumerate(('q', 'k', 'v')):
        out[f'{prefix}.{n}_proj.weight'] = w[i * D:(i + 1) * D]
        out[f'{prefix}.{n}_proj.bias'] = b[i * D:(i + 1) * D]
    out[f'{prefix}.out_proj.weight'] = attn.out_proj.weight
    out[f'{prefix}.out_proj.bias'] = attn.out_proj.bias


def named(layer, kind):
    """addnorm's parameter names -> PyTorch tensors (views into the layer's parameters)."""
    out = {}
    split_in_proj('self_attn', layer.self_attn, out)
    if kind == 'decoder':
        split_in_proj('cross_attn', layer.multihead_attn, out)
    out['ffn.linear1.weight'] = layer.linear1.weight
    out['ffn.linear1.bias'] = layer.linear1.bias
    out['ffn.linear2.weight'] = layer.linear2.weight
    out['ffn.linear2.bias'] = layer.linear2.bias
    for i in (1, 2, 3) if kind == 'decoder' else (1, 2):
        norm = getattr(layer, f'norm{i}')
        out[f'norm{i}.weight'] = norm.weight
        out[f'norm{i}.bias'] = norm.bias
    return out


def grads(layer, kind):
    out = {}
    g = {n: p.grad for n, p in layer.named_parameters()}
    for prefix, tname in (('self_attn', 'self_attn'), ('cross_attn', 'multihead_attn')):
        if prefix == 'cross_attn' and kind != 'decoder':
            continue
        w, b = g[f'{tname}.in_proj_weight'], g[f'{tname}.in_proj_bias']
        for i, n in enumerate(('q', 'k', 'v')):
            out[f'{prefix}.{n}_proj.weight'] = w[i * D:(i + 1) * D]
            out[f'{prefix}.{n}_proj.bias'] = b[i * D:(i + 1) * D]
        out[f'{prefix}.out_proj.weight'] = g[f'{tname}.out_proj.weight']
        out[f'{prefix}.out_proj.bias'] = g[f'{tname}.out_proj.bias']
    for n in ('linear1.weight', 'linear1.bias', 'linear2.weight', 'linear2.bias'):
        out['ffn.' + n] = g[n]
    for i in (1, 2, 3) if kind == 'decoder' else (1, 2):
        out[f'norm{i}.weight'] = g[f'norm{i}.weight']
        out[f'norm{i}.bias'] = g[f'norm{i}.bias']
    return out


def run_case(exe, work, kind, dtype, norm_first, activation, causal, padding, seed):
    torch.manual_seed(seed)
    tdt = torch.float32 if dtype == 'f32' else torch.float64
    cls = torch.nn.TransformerEncoderLayer if kind == 'encoder' else torch.nn.TransformerDecoderLayer
    layer = cls(D, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first).to(tdt)
    with torch.no_grad():  # nonzero biases and norm parameters away from 1 and 0
        for n, p in layer.named_parameters():
            if 'bias' in n or 'norm' in n:
                p.add_(0.2 * torch.randn_like(p))
    x = torch.randn(B, T, D, dtype=tdt, requires_grad=True)
    r = torch.randn(B, T, D, dtype=tdt)
    pad = torch.zeros(B, T, dtype=torch.bool)
    mpad = torch.zeros(B, S, dtype=torch.bool)
    if padding:
        pad[1, T - 2:] = True
        mpad[0, S - 1] = True
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T).to(tdt) if causal else None
    memory = torch.randn(B, S, D, dtype=tdt, requires_grad=True)
    layer.train()
    if kind == 'encoder':
        y = layer(x, src_mask=mask, src_key_padding_mask=pad if padding else None)
    else:
        y = layer(x, memory, tgt_mask=mask, tgt_key_padding_mask=pad if padding else None,
                  memory_key_padding_mask=mpad if padding else None)
    (y * r).sum().backward()

    name = f'{kind}_{dtype}_{"pre" if norm_first else "post"}_{activation}_c{int(causal)}_p{int(padding)}'
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    manifest = []
    for n, t in named(layer, kind).items():
        save(d, manifest, n, t)
    save(d, manifest, 'x', x.reshape(B * T, D))
    save(d, manifest, 'r', r.reshape(B * T, D))
    if padding:
        save(d, manifest, 'valid', (~pad).reshape(-1).double())
    if kind == 'decoder':
        save(d, manifest, 'memory', memory.reshape(B * S, D))
        if padding:
            save(d, manifest, 'memory_valid', (~mpad).reshape(-1).double())
    with open(os.path.join(d, 'manifest.txt'), 'w') as f:
        f.write('\n'.join(manifest) + '\n')
    with open(os.path.join(d, 'config.txt'), 'w') as f:
        f.write(f'kind {kind}\ndtype {dtype}\nd_model {D}\nheads {H}\nd_ff {FF}\nactivation {activation}\n'
                f'norm_first {int(norm_first)}\neps 1e-05\nbatch {B}\nT {T}\nS {S}\ncausal {int(causal)}\n')
    proc = subprocess.run([exe, d], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f'FAIL {name}: parity_run exited {proc.returncode}: {proc.stderr.strip()}')
        return False

    want = {'y': y.reshape(B * T, D), 'dx': x.grad.reshape(B * T, D)}
    if kind == 'decoder':
        want['dmemory'] = memory.grad.reshape(B * S, D)
    for n, g in grads(layer, kind).items():
        want['grad.' + n] = g
    got = {}
    with open(os.path.join(d, 'out.txt')) as f:
        for line in f:
            n, _ = line.split()
            got[n] = np.fromfile(os.path.join(d, 'out.' + n + '.bin'), dtype=np.float64)
    tol = 1e-4 if dtype == 'f32' else 1e-10
    ok = True
    worst = 0.0
    if set(got) != set(want):
        print(f'FAIL {name}: tensors differ: only addnorm {sorted(set(got) - set(want))}, '
              f'only torch {sorted(set(want) - set(got))}')
        return False
    want = {n: w.detach().to(torch.float64).reshape(-1).numpy() for n, w in want.items()}
    # A gradient that is exactly zero in exact arithmetic (the key projection's bias: softmax
    # ignores a constant shift of a row) is rounding noise on both sides; such tensors are judged
    # against 1e-3 of the largest magnitude of the case.
    floor = 1e-3 * max(float(np.max(np.abs(w))) for w in want.values())
    for n, w in want.items():
        a = got[n]
        err = float(np.max(np.abs(a - w)) / max(float(np.max(np.abs(w))), floor))
        worst = max(worst, err)
        if not err <= tol:
            print(f'FAIL {name}: {n} relative error {err:.3e} > {tol:g}')
            ok = False
    print(f'{"ok  " if ok else "FAIL"} {name}: {len(want)} tensors, worst relative error {worst:.2e}')
    return ok


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    torch.set_num_threads(1)
    ok = True
    seed = 0
    for kind in ('encoder', 'decoder'):
        for dtype in ('f64', 'f32'):
            for norm_first in (False, True):
                for activation in ('relu', 'gelu'):
                    for causal, padding in ((kind == 'decoder', True), (True, False)):
                        seed += 1
                        ok &= run_case(exe, work, kind, dtype, norm_first, activation, causal, padding, seed)
    print('all cases agree' if ok else 'some cases differ')
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
