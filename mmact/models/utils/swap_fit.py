"""Function-preserving swap: fit each swapped learnable activation to the
activation it replaced (docs/design/swap.md).

Each replaced activation's inputs are described per channel by a mean and a
standard deviation, from one of three sources:

- ``'bn'``: the input is a BatchNorm's output: its affine
  ``(beta_c, |gamma_c|)`` (data-free);
- ``'propagated'``: otherwise, in a model with BatchNorms, the moments met
  in one forward of generated noise with every BatchNorm normalising by the
  batch's statistics, so that each BN output has exactly the distribution
  its affine describes and what follows (residual sums, attention) is
  computed from it (data-free; running statistics are not touched);
- ``'calibration'``: measured on batches the user gives (eval mode);
- ``'normal'``: N(0, 1), for an activation in a model without BatchNorm.

:meth:`~mmact.models.activations.base.LearnableActivation.match` of the new
activation then fits its parameters (math in :mod:`mmact.ops.apa.gate_fit`).
:func:`defer_match` postpones the fit to the model's first forward, i.e.
after ``init_cfg=dict(type='Pretrained')``, ``load_from`` and ``resume``
loaded their weights; activations whose parameters a checkpoint provided are
not refitted.
"""
import warnings
import weakref
from typing import (Callable, Dict, Iterable, List, NamedTuple, Optional,
                    Sequence, Tuple, Union)

import torch
import torch.nn as nn
from mmengine import dist
from mmengine.logging import print_log
from torch import Tensor
from torch.nn.modules.batchnorm import _BatchNorm

from mmact.models.activations.base import PENDING_MATCH, LearnableActivation

__all__ = [
    'DEFAULT_TOLERANCE', 'InputMoments', 'MatchRecord', 'input_moments',
    'match_activations', 'defer_match', 'check_matchable',
    'check_match_args', 'format_records'
]

#: Relative RMS error per layer a fit to a limit target (ReLU) must reach;
#: see docs/design/swap.md for how it was chosen.
DEFAULT_TOLERANCE = 1e-2

# (qualified name, new activation, replaced activation)
Swap = Tuple[str, nn.Module, nn.Module]


class InputMoments(NamedTuple):
    """Per-channel description of an activation's inputs.

    Attributes:
        means (Tensor): Means, shape (C,), float64.
        stds (Tensor): Standard deviations (> 0), shape (C,), float64.
        source (str): ``'bn'``, ``'propagated'``, ``'bn+propagated'``
            (a shared module called after a BN and elsewhere),
            ``'calibration'`` or ``'normal'``.
    """
    means: Tensor
    stds: Tensor
    source: str


class MatchRecord(NamedTuple):
    """One fitted activation.

    Attributes:
        name (str): Qualified module name.
        replaced (str): Class name of the replaced activation.
        activation (str): Class name of the new one.
        source (str): Where its input moments came from.
        error (float): Relative RMS error reached (largest over channels).
        stats (dict): The new activation's ``activation_stats()`` (means
            over channels).
    """
    name: str
    replaced: str
    activation: str
    source: str
    error: float
    stats: Dict[str, float]


def check_match_args(act: nn.Module, target_types: Sequence[type],
                     tolerance: float) -> None:
    """Refuse a swap with ``match=True`` before the model is touched: an
    activation without a declared fit to one of the types, or a tolerance
    that is not a positive number.

    Args:
        act (nn.Module): One activation built from the swap's ``act_cfg``.
        target_types (sequence[type]): The classes to be replaced.
        tolerance (float): The fit's tolerance.

    Raises:
        TypeError: naming both activation types.
        ValueError: naming the tolerance.
    """
    if (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float))
            or not tolerance > 0):
        raise ValueError(f'match=True: tolerance must be a number > 0 (a '
                         f'relative error such as 0.01), got {tolerance!r}')
    for cls in target_types:
        if not isinstance(act, LearnableActivation):
            raise TypeError(
                f'match=True: {type(act).__name__} is not a learnable '
                f'activation and declares no fit to {cls.__name__}')
        if act.match_kind(cls) is None:
            raise TypeError('match=True: ' + str(act.unmatched_error(cls)))


def check_matchable(swaps: Sequence[Swap]) -> None:
    """Raise before anything is fitted if some pair has no declared fit.

    Args:
        swaps (sequence): ``(name, new, replaced)`` triples.

    Raises:
        TypeError: naming the layer and both activation types.
    """
    for name, new, old in swaps:
        if not isinstance(new, LearnableActivation):
            raise TypeError(
                f'match=True: {name} would become {type(new).__name__}, '
                'which is not a learnable activation and declares no fit '
                f'to the {type(old).__name__} it replaces')
        if new.match_kind(old) is None:
            raise TypeError(f'match=True: {name}: ' +
                            str(new.unmatched_error(old)))


class _Moments:
    """Accumulates per-channel count, sum and sum of squares."""

    def __init__(self) -> None:
        self.count = self.total = self.squares = None
        self.sources = set()

    def add(self, count: Tensor, total: Tensor, squares: Tensor,
            source: str) -> None:
        if self.count is None:
            self.count, self.total, self.squares = count, total, squares
        else:
            self.count = self.count + count
            self.total = self.total + total
            self.squares = self.squares + squares
        self.sources.add(source)

    def add_input(self, x: Tensor, channel_dim: int) -> None:
        x = x.detach().to(torch.float64)
        x = x.movedim(channel_dim % x.dim(), 0).reshape(x.shape[channel_dim],
                                                        -1)
        count = torch.full((x.shape[0], ), float(x.shape[1]),
                           dtype=torch.float64)
        self.add(count, x.sum(1).cpu(), x.pow(2).sum(1).cpu(), 'propagated')

    def add_affine(self, x: Tensor, bn: _BatchNorm, channel_dim: int) -> None:
        channels = x.shape[channel_dim % x.dim()]
        n = float(x.numel() // channels)
        if bn.affine:
            beta = bn.bias.detach().to(torch.float64).cpu()
            gamma = bn.weight.detach().to(torch.float64).cpu()
        else:
            beta = torch.zeros(channels, dtype=torch.float64)
            gamma = torch.ones(channels, dtype=torch.float64)
        count = torch.full_like(beta, n)
        self.add(count, n * beta, n * (gamma * gamma + beta * beta), 'bn')

    def result(self, source: Optional[str] = None) -> InputMoments:
        means = self.total / self.count
        var = (self.squares / self.count - means * means).clamp_min(0)
        # A constant channel has no spread to fit on: a floor relative to
        # the layer's scale keeps the fit defined.
        floor = 1e-4 * float(var.mean().add(means.pow(2).mean()).sqrt())
        stds = var.sqrt().clamp_min(max(floor, 1e-12))
        return InputMoments(
            means, stds, source or '+'.join(sorted(self.sources)))


def _channel_dim(new: nn.Module) -> int:
    return getattr(new, 'channel_dim', 1)


def _has_bn(model: nn.Module) -> bool:
    return any(isinstance(m, _BatchNorm) for m in model.modules())


def _make_input(model: nn.Module,
                example_input: Union[Tensor, Sequence[int], None]) -> Tensor:
    if isinstance(example_input, Tensor):
        return example_input
    if example_input is None:
        # The first 2-d convolution registered is the stem of a backbone.
        stem = next((m for m in model.modules() if isinstance(m, nn.Conv2d)),
                    None)
        if stem is None:
            raise ValueError(
                'match=True: the data-free fit runs the model once on noise '
                f'and {type(model).__name__} has no Conv2d to shape it by: '
                'pass example_input (a tensor or a shape such as '
                '(4, 3, 224, 224)) or calibration batches')
        example_input = (4, stem.in_channels, 224, 224)
    param = next(model.parameters(), None)
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(tuple(example_input), generator=generator)
    return noise if param is None else noise.to(param)


def input_moments(model: nn.Module,
                  swaps: Sequence[Swap],
                  example_input: Union[Tensor, Sequence[int], None] = None,
                  calibration: Optional[Iterable] = None,
                  forward: Optional[Callable] = None) -> Dict[int, InputMoments]:
    """Describe the inputs of the replaced activations, which must still be
    in ``model`` (see the module doc for the sources).

    Args:
        model (nn.Module): The model with its original activations.
        swaps (sequence): ``(name, new, replaced)`` triples.
        example_input (Tensor | sequence[int], optional): Input (or input
            shape, filled with seeded noise) of the data-free forward.
            Defaults to ``(4, C, 224, 224)``, C the input channels of the
            first ``Conv2d`` of ``model``.
        calibration (iterable, optional): Batches; each is passed to
            ``forward`` in eval mode under ``no_grad``.
        forward (callable, optional): What to call with an input. Defaults
            to ``model``.

    Returns:
        dict: ``id(replaced module)`` -> :class:`InputMoments`.
    """
    forward = model if forward is None else forward
    channel_dims = {id(old): _channel_dim(new) for _, new, old in swaps}
    if calibration is None and not _has_bn(model):
        return {
            id(old): InputMoments(
                torch.zeros(getattr(new, 'num_parameters', 1),
                            dtype=torch.float64),
                torch.ones(getattr(new, 'num_parameters', 1),
                           dtype=torch.float64), 'normal')
            for _, new, old in swaps
        }
    moments = {key: _Moments() for key in channel_dims}
    bn_outputs = {}

    def record_bn(bn, args, out):
        if isinstance(out, Tensor):
            bn_outputs[id(out)] = (weakref.ref(out), out._version, bn)

    def record_input(module, args):
        x = args[0]
        dim = channel_dims[id(module)]
        entry = bn_outputs.get(id(x))
        if (calibration is None and entry is not None and entry[0]() is x
                and entry[1] == x._version):
            moments[id(module)].add_affine(x, entry[2], dim)
        else:
            moments[id(module)].add_input(x, dim)

    modules = {id(old): old for _, _, old in swaps}
    handles = [m.register_forward_pre_hook(record_input)
               for m in modules.values()]
    flags = {m: (m.training, getattr(m, 'track_running_stats', None))
             for m in model.modules()}
    try:
        model.eval()
        with torch.no_grad():
            if calibration is not None:
                for batch in calibration:
                    forward(batch)
            else:
                for m in model.modules():
                    if isinstance(m, _BatchNorm):
                        # Batch statistics, running buffers left alone.
                        m.training, m.track_running_stats = True, False
                        handles.append(m.register_forward_hook(record_bn))
                forward(_make_input(model, example_input))
    finally:
        for h in handles:
            h.remove()
        for m, (training, track) in flags.items():
            m.training = training
            if track is not None:
                m.track_running_stats = track
    result = {}
    for _, new, old in swaps:
        acc = moments[id(old)]
        if acc.count is None:
            raise RuntimeError(
                f'match=True: the {type(old).__name__} to be replaced by '
                f'{type(new).__name__} was not called by the forward that '
                'measures its inputs; pass a forward that reaches it')
        result[id(old)] = acc.result(
            'calibration' if calibration is not None else None)
    return result


def match_activations(swaps: Sequence[Swap],
                      moments: Dict[int, InputMoments],
                      tolerance: float = DEFAULT_TOLERANCE,
                      broadcast: bool = False) -> List[MatchRecord]:
    """Fit every new activation to the one it replaced; warn (one message,
    every layer named with its error) where the tolerance is not reached.

    Args:
        swaps (sequence): ``(name, new, replaced)`` triples; a new module
            listed several times (shared) is fitted once, on the moments of
            its first entry.
        moments (dict): From :func:`input_moments`.
        tolerance (float): See :meth:`LearnableActivation.match`.
        broadcast (bool): In a distributed run, copy rank 0's fitted values
            to all ranks.

    Returns:
        list[MatchRecord]: One per fitted module.
    """
    check_matchable(swaps)
    records, done, missed = [], set(), []
    for name, new, old in swaps:
        if id(new) in done:
            continue
        done.add(id(new))
        m = moments[id(old)]
        error = float(new.match(old, m.means, m.stds, tolerance).max())
        if broadcast and dist.is_distributed():
            for param in new.parameters(recurse=False):
                dist.broadcast(param.data, src=0)
        stats = {
            key: float(value.float().mean())
            for key, value in new.activation_stats().items()
        }
        records.append(
            MatchRecord(name, type(old).__name__, type(new).__name__,
                        m.source, error, stats))
        if error > tolerance * (1 + 1e-6):
            missed.append(f'{name} ({type(old).__name__} -> '
                          f'{type(new).__name__}): {error:.3g}')
    if missed:
        warnings.warn(
            f'match: {len(missed)} fitted activation(s) stay above the '
            f'relative error tolerance {tolerance:g}: ' + '; '.join(missed),
            stacklevel=2)
    return records


def format_records(records: Sequence[MatchRecord]) -> str:
    """One line per fitted activation."""
    lines = []
    for r in records:
        values = ', '.join(f'{k} {v:.4g}' for k, v in r.stats.items())
        lines.append(f'{r.name}: {r.replaced} -> {r.activation} '
                     f'[{r.source}] {values}, rel. error {r.error:.2e}')
    return '\n'.join(lines)


class _MatchOnFirstForward:
    """Forward pre-hook that fits the pending activations once."""

    def __init__(self, tolerance: float) -> None:
        self.tolerance = tolerance
        self.handle = None

    def __call__(self, model: nn.Module, args) -> None:
        self.handle.remove()
        places = [(parent, attr, child)
                  for _, parent in model.named_modules(remove_duplicate=False)
                  for attr, child in parent._modules.items()
                  if PENDING_MATCH in getattr(child, '__dict__', {})]
        if not places:
            return
        swaps = [(f'{type(parent).__name__}.{attr}', child,
                  child.__dict__[PENDING_MATCH][0])
                 for parent, attr, child in places]
        for parent, attr, child in places:
            parent._modules[attr] = child.__dict__[PENDING_MATCH][0]
        try:
            x = args[0] if args and isinstance(args[0], Tensor) else None
            shape = None if x is None else (max(x.shape[0], 4), *x.shape[1:])
            moments = input_moments(model, swaps, shape)
        finally:
            for parent, attr, child in places:
                parent._modules[attr] = child
        names = {id(m): n for n, m in model.named_modules()}
        swaps = [(names.get(id(new), name), new, old)
                 for name, new, old in swaps]
        records = match_activations(swaps, moments, self.tolerance,
                                    broadcast=True)
        for _, new, _ in swaps:
            new.__dict__.pop(PENDING_MATCH, None)
        print_log(
            f'match: fitted {len(records)} activation(s) to the ones they '
            'replaced\n' + format_records(records),
            logger='current')


def defer_match(model: nn.Module,
                swaps: Sequence[Swap],
                tolerance: float = DEFAULT_TOLERANCE) -> None:
    """Fit the swapped activations on the first forward of ``model``.

    The data-free moments (section 'bn' / 'propagated' of the module doc)
    are measured then, on seeded noise shaped like that first input (batch
    at least 4), with the replaced activations put back for that forward.
    An activation whose parameters a checkpoint loads before the first
    forward keeps them.

    Args:
        model (nn.Module): The model holding the new activations (e.g. a
            backbone).
        swaps (sequence): ``(name, new, replaced)`` triples.
        tolerance (float): See :meth:`LearnableActivation.match`.
    """
    check_matchable(swaps)
    for _, new, old in swaps:
        # A one-element list: the replaced module must not be registered.
        new.__dict__[PENDING_MATCH] = [old]
    hook = _MatchOnFirstForward(tolerance)
    hook.handle = model.register_forward_pre_hook(hook)
