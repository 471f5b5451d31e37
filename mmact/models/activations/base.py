"""The protocol every learnable activation declares once.

A learnable activation mixes in :class:`LearnableActivation` and states, in
its own file:

* ``no_decay_params``: names of its own parameters that train without weight
  decay (read by ``ActivationOptimWrapperConstructor`` and
  :func:`mmact.utils.activation_paramwise_cfg`);
* :meth:`~LearnableActivation.activation_stats`: its learned values as the
  forward uses them (read by ``ActivationStatsHook`` and
  :mod:`mmact.analysis`);
* :meth:`~LearnableActivation.forward_stats`, for activations whose
  behaviour depends on the input (FleS): statistics of one forward pass;
* ``pointwise``: whether ``forward`` is one fixed elementwise curve once the
  parameters are known (curves and ``E[f(X)]`` are then plotted);
* ``match_targets`` and :meth:`~LearnableActivation.match`: the activations
  it can stand in for and the fit of its parameters to one of them (the
  function-preserving swap of :mod:`mmact.models.utils.swap_fit`);
* :meth:`~LearnableActivation.backward_from_sources`: its backward at an
  input that was not kept but is rebuilt from the tensors it was computed
  from (the memory-lean backward of
  :mod:`mmact.models.backbones.recompute`); the default re-records the
  forward, operators that rebuild the input themselves override it.

Nothing else in mmact lists activation types, so a new activation touches
only its own file (see ``docs/contributing.md``).
"""
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch import Tensor

from mmact.ops.apa import rebuild_input

__all__ = [
    'LearnableActivation', 'has_forward_stats', 'no_decay_parameters',
    'PENDING_MATCH', 'recorded_backward'
]

# Attribute of an activation whose function-preserving fit waits for the
# model's first forward (set by mmact.models.utils.swap_fit).
PENDING_MATCH = '_pending_match'


class LearnableActivation:
    """Mixin declaring what optimisers, hooks and probes read.

    Mix it in before the ``nn.Module`` base, e.g.
    ``class MyAct(LearnableActivation, BaseModule)``.

    Attributes:
        no_decay_params (tuple[str]): Names of the module's own parameters
            (not of submodules) that get no weight decay. Names that are
            not a parameter of an instance (e.g. a buffer when a value is
            fixed) are skipped.
        pointwise (bool): ``forward`` applies one elementwise curve per
            parameter set. Pointwise activations with per-channel
            parameters also expose ``num_parameters`` and ``channel_dim``.
        match_targets (tuple[tuple[type, str]]): ``(activation class, kind)``
            pairs :meth:`match` can fit; kinds as in
            :func:`mmact.ops.apa.gate_fit.fit_gate` (``'exact'``, ``'best'``,
            ``'limit'``). Empty: no fit is declared.
    """

    no_decay_params: Tuple[str, ...] = ()
    pointwise: bool = True
    match_targets: Tuple[Tuple[type, str], ...] = ()

    def match_kind(self, target: Union[nn.Module, type]) -> Optional[str]:
        """How :meth:`match` fits ``target`` (None: it cannot).

        Args:
            target (nn.Module | type): The activation to stand in for, or
                its class.
        """
        target_cls = target if isinstance(target, type) else type(target)
        for cls, kind in self.match_targets:
            if issubclass(target_cls, cls):
                return kind
        return None

    def match(self, target: nn.Module, means: Tensor, stds: Tensor,
              tolerance: float) -> Tensor:
        """Set the parameters so that this activation computes ``target``
        (exactly, or as closely as declared) on inputs ``N(means, stds^2)``
        per channel.

        Args:
            target (nn.Module): The activation being replaced.
            means (Tensor): Per-channel input means, shape (C,).
            stds (Tensor): Per-channel input standard deviations, (C,).
            tolerance (float): Relative error a fit to a limit of the
                family (ReLU for AGLU) must reach.

        Returns:
            Tensor: Relative RMS error reached (one value, or per channel).

        Raises:
            TypeError: No fit to ``target`` is declared.
        """
        raise self.unmatched_error(target)

    def unmatched_error(self, target: Union[nn.Module, type]) -> TypeError:
        """The error for a ``target`` (module or class) without a declared
        fit."""
        declared = sorted({cls.__name__ for cls, _ in self.match_targets})
        target_cls = target if isinstance(target, type) else type(target)
        return TypeError(
            f'{type(self).__name__} cannot stand in for '
            f'{target_cls.__name__}: it declares no function-preserving fit '
            f'to it (it can match: {", ".join(declared) or "nothing"}). '
            'Swap without match=True, or choose an activation that declares '
            'one (APA for Sigmoid gates; AGLU for ReLU, SiLU, GELU, ...).')

    def backward_from_sources(
            self, grad_out: Tensor, params: Sequence[Tensor],
            sources: Sequence[Optional[Tensor]]
    ) -> Tuple[Tensor, List[Optional[Tensor]]]:
        """Backward of ``self(z)`` where ``z`` was not kept:
        ``z == rebuild_input(*sources)`` (:func:`mmact.ops.apa.rebuild_input`).

        The default is :func:`recorded_backward` (``z`` rebuilt with torch,
        the forward recorded once more); an activation whose operator can
        take the sources itself overrides it (APA / AGLU).

        Args:
            grad_out (Tensor): Gradient of the output.
            params (sequence[Tensor]): The module's parameters as saved by
                the forward, in ``self.parameters()`` order.
            sources (sequence[Tensor | None]): ``(src, scale, shift, other,
                other_scale)``.

        Returns:
            tuple: Gradient of ``z`` and one gradient (or None) per entry of
            ``params``.
        """
        return recorded_backward(self, grad_out, params, sources)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Parameters a checkpoint provides are trained values: a fit that
        # waits for the first forward must not overwrite them.
        if any(prefix + name in state_dict
               for name, _ in self.named_parameters(recurse=False)):
            self.__dict__.pop(PENDING_MATCH, None)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def activation_stats(self) -> Dict[str, Tensor]:
        """Learned values as the forward uses them (after clamps).

        Returns:
            dict[str, Tensor]: Name -> values (one per layer or per
            channel). Empty when nothing is learned or the values depend on
            the input.
        """
        return {}

    def forward_stats(self, x: Tensor) -> Dict[str, float]:
        """Statistics of what the layer does to the input ``x``.

        Only input-dependent activations override this;
        :func:`has_forward_stats` tells which.

        Args:
            x (Tensor): An input of the layer.

        Returns:
            dict[str, float]: Name -> value for this input.
        """
        return {}


def recorded_backward(
        module: nn.Module, grad_out: Tensor, params: Sequence[Tensor],
        sources: Sequence[Optional[Tensor]]
) -> Tuple[Tensor, List[Optional[Tensor]]]:
    """Rebuild ``z`` from ``sources``, record ``module(z)`` again and
    differentiate it (any module; the generic memory-lean backward).

    Args: as :meth:`LearnableActivation.backward_from_sources`.
    """
    with torch.enable_grad():
        z = rebuild_input(*sources).detach().requires_grad_()
        # An in-place module must not write into the leaf `z`.
        y = module(z.clone() if getattr(module, 'inplace', False) else z)
        wanted = [p for p in params if p.requires_grad]
        grads = torch.autograd.grad(y, [z, *wanted], grad_out,
                                    allow_unused=True)
    it = iter(grads[1:])
    return grads[0], [next(it) if p.requires_grad else None for p in params]


def has_forward_stats(module: nn.Module) -> bool:
    """Whether ``module`` is a learnable activation that overrides
    :meth:`LearnableActivation.forward_stats`.

    Args:
        module (nn.Module): Any module.
    """
    return (isinstance(module, LearnableActivation) and type(module)
            .forward_stats is not LearnableActivation.forward_stats)


def no_decay_parameters(model: nn.Module) -> Iterator[Tuple[str, Tensor]]:
    """``(full name, parameter)`` of every parameter a learnable activation
    of ``model`` declares in ``no_decay_params``.

    Args:
        model (nn.Module): The model to walk.
    """
    for mod_name, module in model.named_modules():
        if not isinstance(module, LearnableActivation):
            continue
        own = dict(module.named_parameters(recurse=False))
        for name in module.no_decay_params:
            if name in own:
                yield (f'{mod_name}.{name}' if mod_name else name), own[name]
