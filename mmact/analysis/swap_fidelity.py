"""How far a model with swapped activations computes from the original one
(``tools/analysis/swap_fidelity.py``).

For each variant of the swap (new activations at their init ranges, fitted
to the replaced ones, or at fixed values) two deviations are measured on the
same inputs:

- per layer, *local*: the new activation applied to the input the original
  activation received at that position, against the original's output
  (what the fit controls, without upstream drift);
- at the output: relative L2 distance and mean cosine of the last feature
  map (or logits), and for classifiers the top-1 agreement.
"""
import copy
from collections import OrderedDict
from typing import Callable, Dict, List, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm

from mmact.models.utils.swap_fit import (DEFAULT_TOLERANCE, check_matchable,
                                      input_moments, match_activations)
from mmact.models.utils.swap import replace_activations, untie_activations

__all__ = ['calibrate_bn', 'swap_variants', 'compare_variants']


def calibrate_bn(model: nn.Module, inputs: Sequence[Tensor],
                 forward: Callable) -> None:
    """Recompute every BatchNorm's running statistics on ``inputs``
    (cumulative average), for models whose statistics do not describe the
    inputs (e.g. random weights)."""
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    saved = [(m, m.momentum, m.training) for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    with torch.no_grad():
        for x in inputs:
            forward(x)
    for m, momentum, training in saved:
        m.momentum, m.training = momentum, training


def swap_variants(model: nn.Module,
                  act_cfg: dict,
                  target_types,
                  variants: Dict[str, dict],
                  inputs: Sequence[Tensor],
                  forward: Callable,
                  untie: bool = True,
                  seed: int = 0) -> Dict[str, Tuple[nn.Module, list]]:
    """Copies of ``model`` with the activations swapped per variant.

    Args:
        model (nn.Module): The original model (eval mode); untied in place
            when ``untie`` (which keeps its function).
        act_cfg (dict): Config of the new activation.
        target_types: Classes (or names) to replace.
        variants (dict): name -> settings: ``dict(kind='random')`` (init
            ranges), ``dict(kind='match', tolerance=..., calibration=...)``
            (fitted, data-free or on ``inputs``) or ``dict(kind='fixed',
            kappa=..., lambda_=...)``.
        inputs (sequence[Tensor]): Calibration batches for
            ``calibration=True`` variants.
        forward (callable): ``forward(module, x)`` of a copy.
        untie (bool): Untie the stock ResNet blocks first.
        seed (int): Seed of the random-init variant.

    Returns:
        dict: name -> (model copy, ``(name, new, replaced)`` triples).
    """
    if untie:
        untie_activations(model)
    out = {}
    for name, spec in variants.items():
        copied = copy.deepcopy(model)
        moments = {}

        def measure(swaps, spec=spec, copied=copied):
            check_matchable(swaps)
            moments.update(
                input_moments(
                    copied,
                    swaps,
                    example_input=inputs[0].shape,
                    calibration=inputs if spec.get('calibration') else None,
                    forward=lambda x: forward(copied, x)))

        torch.manual_seed(seed)
        swaps = replace_activations(
            copied, act_cfg, target_types,
            before=measure if spec['kind'] == 'match' else None)
        if spec['kind'] == 'match':
            match_activations(swaps, moments,
                              spec.get('tolerance', DEFAULT_TOLERANCE))
        elif spec['kind'] == 'fixed':
            with torch.no_grad():
                for _, new, _ in swaps:
                    new.kappa_param.fill_(spec['kappa'])
                    new.lambda_param.fill_(spec.get('lambda_', 1.0))
        elif spec['kind'] != 'random':
            raise ValueError(f'variant {name!r}: kind must be random, match '
                             f'or fixed, got {spec["kind"]!r}')
        copied.eval()
        out[name] = (copied, swaps)
    return out


def _last(output) -> Tensor:
    while isinstance(output, (tuple, list)):
        output = output[-1]
    return output


def compare_variants(model: nn.Module,
                     swapped: Dict[str, Tuple[nn.Module, list]],
                     inputs: Sequence[Tensor],
                     forward: Callable,
                     classifier: bool = False) -> dict:
    """Local per-layer and output deviations of each swapped copy.

    Args:
        model (nn.Module): The original (untied) model, eval mode.
        swapped (dict): From :func:`swap_variants`.
        inputs (sequence[Tensor]): Batches.
        forward (callable): ``forward(module, x)`` -> features or logits.
        classifier (bool): The output is logits: report top-1 agreement.

    Returns:
        dict: ``{'layers': {layer: {variant: error}}, 'output': {variant:
        {'rel_l2', 'cosine'[, 'top1_agreement']}}, 'params': {variant:
        {layer: activation_stats}}}``.
    """
    originals = dict(model.named_modules(remove_duplicate=False))
    sums: Dict[str, Dict[str, List[float]]] = OrderedDict()
    # One pre-hook per original module compares every variant's module.
    by_module: Dict[int, list] = {}
    for variant, (_, swaps) in swapped.items():
        for layer, new, _ in swaps:
            by_module.setdefault(id(originals[layer]), []).append(
                (layer, new, variant))
    hooks = []
    for old in {id(m): m for m in originals.values()}.values():
        entries = by_module.get(id(old))
        if not entries:
            continue

        def hook(module, args, entries=entries):
            x = args[0]
            ref = type(module).forward(module, x.clone())
            for name, new, variant in entries:
                diff = new(x).to(ref.dtype) - ref
                acc = sums.setdefault(name, OrderedDict()).setdefault(
                    variant, [0.0, 0.0])
                acc[0] += float(diff.pow(2).sum())
                acc[1] += float(ref.pow(2).sum())

        hooks.append(old.register_forward_pre_hook(hook))
    outputs = {variant: [] for variant in swapped}
    references = []
    try:
        with torch.no_grad():
            for x in inputs:
                references.append(_last(forward(model, x)).float())
    finally:
        for h in hooks:
            h.remove()
    with torch.no_grad():
        for variant, (copied, _) in swapped.items():
            for x in inputs:
                outputs[variant].append(_last(forward(copied, x)).float())
    report = {'layers': OrderedDict(), 'output': OrderedDict(), 'params': {}}
    for layer, per_variant in sums.items():
        report['layers'][layer] = {
            v: (num / den)**0.5 if den > 0 else 0.0
            for v, (num, den) in per_variant.items()
        }
    ref = torch.cat([r.flatten(1) for r in references])
    for variant, outs in outputs.items():
        out = torch.cat([o.flatten(1) for o in outs])
        entry = {
            'rel_l2': float((out - ref).norm() / ref.norm()),
            'cosine': float(nn.functional.cosine_similarity(out, ref).mean())
        }
        if classifier:
            entry['top1_agreement'] = float(
                (out.argmax(1) == ref.argmax(1)).float().mean())
        report['output'][variant] = entry
        report['params'][variant] = {
            layer: {
                k: float(v.float().mean())
                for k, v in new.activation_stats().items()
            }
            for layer, new, _ in swapped[variant][1]
        }
    return report
