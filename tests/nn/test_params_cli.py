#!/usr/bin/python3
"""addnorm params: the presets' exact totals (gpt2-small 124,439,808, gpt2-medium 354,823,168,
bert-base 109,482,240, transformer-base 63,082,496 and its layer norms 30,720), the JSON shape,
by_kind summing to the total, configurations against hand-written formulas, and usage errors
(exit 2). Usage: test_params_cli.py ADDNORM. Exits non-zero on any failure."""
import json
import subprocess
import sys

EXE = sys.argv[1]
failures = []


def run(*args):
    return subprocess.run([EXE, 'params', *args], capture_output=True, text=True)


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what)
    if not cond:
        failures.append(what)


def params_json(*args):
    p = run(*args, '--json')
    check(p.returncode == 0, f'{" ".join(args)}: exit 0 (stderr: {p.stderr.strip()})')
    return json.loads(p.stdout) if p.returncode == 0 else {'total': None, 'by_kind': {}, 'components': []}


def layer_formula(d, ff, attns, norms, bias=True):
    """One layer: attns attention blocks (4 d x d projections), an FFN, norms LayerNorms."""
    b = 1 if bias else 0
    return attns * 4 * (d * d + b * d) + (d * ff + b * ff + ff * d + b * d) + norms * 2 * d


PRESETS = {'gpt2-small': 124439808, 'gpt2-medium': 354823168, 'bert-base': 109482240,
           'transformer-base': 63082496}
for name, total in PRESETS.items():
    j = params_json('--preset', name)
    check(j['total'] == total, f'{name}: total {j["total"]} == {total}')
    check(sum(j['by_kind'].values()) == j['total'], f'{name}: by_kind sums to the total')
    check(sum(c['total'] for c in j['components']) == j['total'], f'{name}: components sum to the total')
    for k in ('embedding', 'position', 'attention', 'ffn', 'norm', 'head'):
        check(k in j['by_kind'], f'{name}: by_kind has "{k}"')
    check('other' not in j['by_kind'], f'{name}: every parameter has a kind')
    check(j['preset'] == name, f'{name}: "preset" names it')

base = params_json('--preset', 'transformer-base')
check(base['by_kind']['norm'] == 30720, 'transformer-base: layer norm parameters 30720 (6 x 2 x 1024 + 6 x 3 x 1024)')
check(base['config']['encoder_layers'] == 6 and base['config']['decoder_layers'] == 6, 'transformer-base: 6 + 6 layers')
bert = params_json('--preset', 'bert-base')
check(bert['by_kind']['pooler'] == 768 * 768 + 768 and bert['by_kind']['token_type'] == 2 * 768,
      'bert-base: pooler and token-type embeddings by formula')
small = params_json('--preset', 'gpt2-small')
check(small['by_kind']['embedding'] == 50257 * 768 and small['by_kind']['position'] == 1024 * 768,
      'gpt2-small: embedding and position tables')

plain = run('--preset', 'gpt2-small')
check(plain.returncode == 0 and 'total 124,439,808' in plain.stdout, 'plain output: "total 124,439,808"')
check('final norm' in plain.stdout and 'decoder layer' in plain.stdout, 'plain output: the components')
plain = run('--preset', 'transformer-base')
check('norm                  30,720' in plain.stdout, 'plain output: by kind norm 30,720')

# Configurations against formulas.
V, D, H, FF, N, T = 1000, 64, 4, 256, 3, 128
cfg = ['--vocab', str(V), '--d-model', str(D), '--heads', str(H), '--d-ff', str(FF), '--max-len', str(T)]
pre = params_json('--arch', 'decoder', '--layers', str(N), *cfg, '--placement', 'pre')
want = V * D + T * D + N * layer_formula(D, FF, 1, 2) + 2 * D
check(pre['total'] == want, f'decoder pre, tied: {pre["total"]} == {want}')
untied = params_json('--arch', 'decoder', '--layers', str(N), *cfg, '--placement', 'pre', '--untied')
check(untied['total'] == want + V * D and untied['by_kind']['head'] == V * D, 'decoder --untied adds V x d')
post = params_json('--arch', 'decoder', '--layers', str(N), *cfg, '--placement', 'post')
check(post['total'] == want - 2 * D, 'post: no final norm')
sandwich = params_json('--arch', 'decoder', '--layers', str(N), *cfg, '--placement', 'sandwich')
check(sandwich['by_kind']['norm'] == N * 4 * 2 * D + 2 * D, 'sandwich: four norms per layer and a final norm')
rms = params_json('--arch', 'decoder', '--layers', str(N), *cfg, '--placement', 'pre', '--norm', 'rms')
check(rms['by_kind']['norm'] == (2 * N + 1) * D, 'rms: weight only')
rezero = params_json('--arch', 'decoder', '--layers', str(N), *cfg, '--placement', 'rezero')
check(rezero['by_kind']['norm'] == 0 and rezero['by_kind'].get('residual') == 2 * N, 'rezero: one scalar per box, no norm')
nobias = params_json('--arch', 'decoder', '--layers', str(N), *cfg, '--placement', 'pre', '--no-bias')
check(nobias['total'] == V * D + T * D + N * layer_formula(D, FF, 1, 2, bias=False) + 2 * D, '--no-bias')
encdec = params_json('--arch', 'encoder-decoder', '--encoder-layers', '2', '--decoder-layers', '3', *cfg,
                     '--positions', 'sinusoidal')
want = V * D + 2 * layer_formula(D, FF, 1, 2) + 3 * layer_formula(D, FF, 2, 3)
check(encdec['total'] == want, f'encoder-decoder 2 + 3, post, sinusoidal, tied: {encdec["total"]} == {want}')
check(params_json('--preset', 'gpt2-small', '--layers', '6')['total'] == 124439808 - 6 * 7087872,
      'a preset with a flag overriding one field')

# Usage errors: exit 2 with a message.
for args, what in ((['--heads', '5'], 'heads not dividing d_model'),
                   (['--preset', 'gpt3'], 'unknown preset'),
                   (['--norm', 'group'], 'unknown norm'),
                   (['--vocab', '0'], 'vocab 0'),
                   (['--tied', '--untied'], '--tied with --untied'),
                   (['--layers', '2', '--encoder-layers', '2'], '--layers with --encoder-layers'),
                   (['--bogus'], 'unknown option')):
    p = run(*args)
    check(p.returncode == 2 and p.stderr.startswith('addnorm: error:') and p.stdout == '',
          f'{what}: exit 2 ({p.returncode}: {p.stderr.strip()[:100]})')

print(f'{len(failures)} failures' if failures else 'all checks passed')
sys.exit(1 if failures else 0)
