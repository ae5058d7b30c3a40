"""Shared by gpt_parity.py and seq2seq_parity.py: the reference training steps (clip by global norm
+ AdamW) run in PyTorch from the same start as the C++ model, and their expected outputs."""
import numpy as np
import torch

STEPS, LR, BETAS, ADAM_EPS, WD, MAX_NORM = 5, 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0


def training_steps(p, step_loss_of, want):
    """Runs STEPS steps of zero_grad, loss, backward, clip_grad_norm_, AdamW on copies of the
    parameters p (name -> leaf tensor); step_loss_of(q) gives the loss of parameters q. Fills
    want['losses'] (before each update), want['norms'] and want['after.<name>']. The key
    projections' biases get a gradient that is zero in exact arithmetic (softmax ignores a constant
    shift of its row): both sides hold rounding noise, which Adam normalizes into steps of +-lr, so
    their values after the steps are not compared (their gradients are, against a floor)."""
    q = {n: t.detach().clone().requires_grad_(True) for n, t in p.items()}
    opt = torch.optim.AdamW(list(q.values()), lr=LR, betas=BETAS, eps=ADAM_EPS, weight_decay=WD)
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = step_loss_of(q)
        loss.backward()
        losses.append(loss.item())
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(q.values()), MAX_NORM)))
        opt.step()
    want['losses'] = losses
    want['norms'] = norms
    for n, t in q.items():
        if not n.endswith('k_proj.bias'):
            want['after.' + n] = t.detach().to(torch.float64).numpy()


def rel(a, b, floor):
    """max |a - b| / max(max |b|, floor) over the elements; inf when the shapes differ."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        return float('inf')
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), floor))
