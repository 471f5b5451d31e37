"""What ActResNet adds to an upstream ResNet, once for mmdet's and
mmpretrain's classes.

:class:`ActResNetMixin` goes in front of an upstream ``ResNet`` /
``ResNetV1d`` / ``ResNeXt``; the face class names its blocks
(``arch_settings``, blocks built on :class:`~.act_res_block.ActBlockMixin`).
Upstream keeps its arguments, defaults, module layout and state-dict keys;
the mixin adds ``act_cfg``, ``attention_cfg`` and ``recompute_act``, checks
the arguments with messages that name the value (raising exceptions that are
also of upstream's type), rebuilds the stem's activations from ``act_cfg``,
freezes them with the stem, and refuses a ``Pretrained`` checkpoint that would
load nothing.
"""
import functools
import inspect
from typing import Optional

import torch.nn as nn
from mmcv.cnn import build_activation_layer
from mmengine.registry import MODELS
from mmengine.runner.checkpoint import CheckpointLoader

from .recompute import default_recompute
from .reference_layout import check_pretrained_layout

__all__ = [
    'ActResNetMixin', 'UnsupportedDepthError', 'StageArgumentError',
    'FrozenStagesError', 'with_blocks'
]

_ATTENTION_HINT = ("e.g. dict(type='SEAttention') or dict(type='APASELayer')")


class UnsupportedDepthError(ValueError, KeyError):
    """A depth the architecture table lacks (upstream raises KeyError)."""

    # KeyError's own str() would quote the message.
    __str__ = ValueError.__str__


class StageArgumentError(ValueError, AssertionError):
    """``num_stages``, ``out_indices``, ``strides`` or ``dilations`` that do
    not fit together (upstream asserts)."""


class FrozenStagesError(ValueError, AttributeError):
    """``frozen_stages`` outside ``[-1, num_stages]`` (upstream fails with
    AttributeError looking up the missing stage, or ignores a value below
    -1)."""


def with_blocks(arch_settings: dict, blocks: dict) -> dict:
    """Upstream's ``arch_settings`` (depth -> (block class, blocks per
    stage)) with each block class replaced by ``blocks[block class]``."""
    return {
        depth: (blocks[block], stage_blocks)
        for depth, (block, stage_blocks) in arch_settings.items()
    }


def _resolve(cfg: Optional[dict], what: str) -> None:
    """Raise a KeyError naming ``what`` when ``cfg['type']`` is unknown.

    Checked once in the backbone constructor so a typo fails before dozens of
    blocks are built, with the argument name in the message.
    """
    if cfg is None:
        return
    if not isinstance(cfg, dict) or 'type' not in cfg:
        raise TypeError(f'{what} must be None or a dict with a "type" key, '
                        f'got {cfg!r}')
    layer_type = cfg['type']
    if isinstance(layer_type, type):
        return
    # Same lookup as Registry.build: current default scope, then its parents.
    with MODELS.switch_scope_and_registry(None) as registry:
        found = registry.get(layer_type)
    if found is None:
        hint = f' ({_ATTENTION_HINT})' if what == 'attention_cfg' else ''
        raise KeyError(f'{what}: type {layer_type!r} is not registered{hint}; '
                       'is the module imported (custom_imports) and spelled '
                       'correctly?')


@functools.lru_cache(maxsize=None)
def _face_signature(cls: type) -> inspect.Signature:
    """The mixin's arguments, then upstream's (every ``__init__`` of the MRO,
    the first one to name an argument gives its default), less those the
    class fixes (``fixed_arguments``, e.g. a V1d's ``deep_stem``)."""
    own = inspect.signature(ActResNetMixin.__init__).parameters
    params = [p for name, p in own.items() if name not in ('self', 'kwargs')]
    seen = {p.name for p in params} | set(cls.fixed_arguments)
    for klass in cls.__mro__:
        if '__init__' not in vars(klass) or klass is ActResNetMixin or \
                not issubclass(klass, nn.Module):
            continue
        for name, param in inspect.signature(klass.__init__).parameters.items():
            if name == 'self' or name in seen or param.kind in (
                    param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            seen.add(name)
            params.append(param.replace(kind=param.KEYWORD_ONLY))
    return inspect.Signature(params)


class _ConstructorSignature:
    """``inspect.signature(cls)`` shows the whole contract instead of
    ``**kwargs``; an instance answers None, so its signature stays its
    call's."""

    def __get__(self, obj: object, owner: type) -> Optional[inspect.Signature]:
        return None if obj is not None else _face_signature(owner)


class ActResNetMixin:
    """Configurable activations and attention for an upstream ResNet.

    Args:
        depth (int): A key of the class's ``arch_settings``.
        act_cfg (dict): Activation for the stem and every block position.
            Defaults to ``dict(type='ReLU', inplace=True)``.
        attention_cfg (dict, optional): Layer applied to the residual branch
            before the add; built with ``in_channels``. Defaults to None.
        recompute_act (bool, optional): Memory-lean activations (see
            :mod:`.recompute`). Defaults to None: on for learnable
            activations and other modules that do not run in place
            (:func:`~.recompute.default_recompute`).
        **kwargs: The upstream class's arguments, with its defaults.
    """

    # Upstream arguments the class sets itself (a V1d's stem and shortcut).
    fixed_arguments = ()
    __signature__ = _ConstructorSignature()

    def __init__(self,
                 depth: int,
                 act_cfg: dict = dict(type='ReLU', inplace=True),
                 attention_cfg: Optional[dict] = None,
                 recompute_act: Optional[bool] = None,
                 **kwargs) -> None:
        self._check_arguments(depth, kwargs)
        _resolve(act_cfg, 'act_cfg')
        _resolve(attention_cfg, 'attention_cfg')
        if act_cfg is None:
            raise TypeError(f'{type(self).__name__}: act_cfg must be a dict, '
                            'got None')
        # Needed by the overridden builders, which upstream's __init__ calls.
        self.act_cfg = act_cfg
        self.attention_cfg = attention_cfg
        # decided by what the activation is, not by its `inplace` argument
        self.recompute_act = (
            default_recompute(build_activation_layer(act_cfg))
            if recompute_act is None else recompute_act)
        super().__init__(depth=depth, **kwargs)

    def _check_arguments(self, depth: int, kwargs: dict) -> None:
        """Refuse what upstream refuses (and a frozen stage that does not
        exist), with the value in the message; ``out_indices`` may be an
        int."""
        name = type(self).__name__
        if depth not in self.arch_settings:
            raise UnsupportedDepthError(
                f'{name}: unsupported depth {depth!r}; choose one of '
                f'{sorted(self.arch_settings)}')
        params = _face_signature(type(self)).parameters

        def get(key):
            return kwargs.get(key, params[key].default)

        num_stages = get('num_stages')
        if not 1 <= num_stages <= 4:
            raise StageArgumentError(f'{name}: num_stages={num_stages!r} is '
                                     'out of range [1, 4]')
        for key in ('strides', 'dilations'):
            if len(get(key)) != num_stages:
                raise StageArgumentError(
                    f'{name}: {key}={tuple(get(key))} needs one value per '
                    f'stage (num_stages={num_stages})')
        out_indices = get('out_indices')
        if isinstance(out_indices, int):
            out_indices = (out_indices, )
        bad = [i for i in out_indices if not 0 <= i < num_stages]
        if bad:
            raise StageArgumentError(
                f'{name}: out_indices {tuple(out_indices)} has {bad} outside '
                f'[0, {num_stages - 1}]')
        kwargs['out_indices'] = tuple(out_indices)
        frozen = get('frozen_stages')
        if not isinstance(frozen, int) or not -1 <= frozen <= num_stages:
            raise FrozenStagesError(
                f'{name}: frozen_stages={frozen!r} is out of range '
                f'[-1, {num_stages}] (num_stages={num_stages})')

    def make_res_layer(self, **kwargs) -> nn.Module:
        """Pass the activation and attention configs to every block."""
        return super().make_res_layer(
            act_cfg=self.act_cfg,
            attention_cfg=self.attention_cfg,
            recompute_act=self.recompute_act,
            **kwargs)

    def _make_stem_layer(self, in_channels: int, stem_channels: int) -> None:
        super()._make_stem_layer(in_channels, stem_channels)
        # Upstream hard-codes ReLU in the stem (mmdet's deep stem:
        # stem.{2,5,8}; mmpretrain's: stem.{0,1,2}.activate); build each one
        # from act_cfg.
        if not self.deep_stem:
            self.relu = build_activation_layer(self.act_cfg)
            return
        for parent in list(self.stem.modules()):
            for child_name, child in list(parent.named_children()):
                if isinstance(child, nn.ReLU):
                    setattr(parent, child_name,
                            build_activation_layer(self.act_cfg))

    def _freeze_stages(self) -> None:
        super()._freeze_stages()
        # Upstream freezes conv1/bn1 only, which would leave a learnable
        # stem activation training inside a frozen stem.
        if self.frozen_stages >= 0 and not self.deep_stem:
            self.relu.eval()
            for param in self.relu.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> nn.Module:
        """Upstream ``train`` returns None, which breaks ``model.eval()``
        chaining; return the module as ``nn.Module.train`` does."""
        super().train(mode)
        return self

    def init_weights(self) -> None:
        """Check a ``Pretrained`` checkpoint's layout, then load as upstream.

        mmengine's ``Pretrained`` init loads with ``strict=False``; a
        reference-code checkpoint (weights under ``'model'``, keys like
        ``unirect1``) would therefore load nothing and only log warnings.
        The check raises instead and names the converter to use. It reads the
        checkpoint once more than mmengine does.
        """
        cfg = self.init_cfg
        if isinstance(cfg, dict) and cfg.get('type') == 'Pretrained':
            checkpoint = CheckpointLoader.load_checkpoint(
                cfg['checkpoint'], map_location='cpu')
            check_pretrained_layout(
                checkpoint,
                self.state_dict().keys(),
                prefix=cfg.get('prefix'),
                source=str(cfg['checkpoint']))
        super().init_weights()
