#!/usr/bin/python3
"""Prints the PyTorch 1.13 reference values embedded in test_loss.cpp and test_optimizer.cpp
(float64). Run it to regenerate them: /usr/bin/python3 tests/nn/torch_reference.py"""
import math

import torch

torch.set_default_dtype(torch.float64)


def show(name, values):
    print(f'// {name}')
    print('{' + ', '.join(f'{float(v):.17g}' for v in values) + '}')


def loss_cases():
    R, V = 5, 7
    z = torch.tensor([[3 * math.sin(0.7 * r + 1.3 * j + 0.1) for j in range(V)] for r in range(R)],
                     requires_grad=True)
    for name, targets, smoothing, ignore in (('smooth0.1_ignore-100', [2, -100, 6, 0, 3], 0.1, -100),
                                             ('smooth0_ignore0', [2, 0, 6, 0, 3], 0.0, 0),
                                             ('smooth0.3_ignore-100', [1, 4, 6, 0, 3], 0.3, -100)):
        z.grad = None
        loss = torch.nn.functional.cross_entropy(z, torch.tensor(targets), ignore_index=ignore,
                                                 label_smoothing=smoothing)
        loss.backward()
        show(f'loss {name}', [loss.item()])
        show(f'grad {name}', z.grad.reshape(-1).tolist())


def grads(ps, t):
    """The gradient at step t: that of sum(0.25 * w^2 + sin(1.3 t + k) * w)."""
    for i, p in enumerate(ps):
        k = torch.arange(p.numel(), dtype=torch.float64).reshape(p.shape) + 10 * i
        p.grad = 0.5 * p.detach() + torch.sin(1.3 * t + k)


def optim_cases():
    for name, make in (
            ('sgd lr 0.1 momentum 0.9 wd 0.01', lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01)),
            ('sgd nesterov lr 0.1 momentum 0.8', lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.8, nesterov=True)),
            ('sgd lr 0.1 momentum 0.9 dampening 0.5', lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5)),
            ('adam lr 0.01 betas 0.8 0.95 eps 1e-6 wd 0.01',
             lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.01)),
            ('adamw lr 0.01 wd 0.1', lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1)),
            ('adamw lr 0.01 wd 0.1 matrices only',
             lambda ps: torch.optim.AdamW([{'params': [ps[0]]}, {'params': [ps[1]], 'weight_decay': 0.0}], lr=0.01,
                                          weight_decay=0.1))):
        p0 = torch.tensor([[0.1 * k - 0.2 for k in range(3)], [0.1 * k + 0.3 for k in range(3)]], requires_grad=True)
        p1 = torch.tensor([0.5 - 0.3 * k for k in range(3)], requires_grad=True)
        opt = make([p0, p1])
        for t in range(1, 6):
            grads([p0, p1], t)
            opt.step()
        show(name, p0.reshape(-1).tolist() + p1.tolist())


loss_cases()
optim_cases()
