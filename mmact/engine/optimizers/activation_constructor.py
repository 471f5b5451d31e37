"""Optimizer wrapper constructor: no weight decay on activation parameters."""
from typing import List, Optional, Union

import torch.nn as nn
from mmengine.optim import DefaultOptimWrapperConstructor
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS

from mmact.models.activations.base import LearnableActivation

__all__ = ['ActivationOptimWrapperConstructor']


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class ActivationOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """mmengine's default constructor plus zero weight decay on the
    parameters that learnable activations declare in ``no_decay_params``.

    Registered in mmengine's root registry, so any mmdet / mmpretrain config
    selects it with::

        optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')

    Every ``paramwise_cfg`` rule (``custom_keys``, ``bias_decay_mult``,
    ``norm_decay_mult``, ``flat_decay_mult``, ...) applies as usual first;
    then the weight decay of each declared activation parameter is
    multiplied by ``paramwise_cfg['activation_decay_mult']`` (default 0), so
    an ``lr_mult`` from ``custom_keys`` is kept. Kappa and lambda of APA /
    AGLU train without decay in Alexandridis et al., Adaptive Parametric
    Activation, 2024; the other activations follow the same rule.

    The optimizer is built from a plain dict, so its param groups are plain
    dicts, as torch builds them and as ``load_state_dict`` (resuming) leaves
    them. From mmengine's ``ConfigDict`` they would be ``ConfigDict`` s:
    dynamo's optimizer support fails on a dict subclass (torch 2.14) when
    ``torch.compile`` traces ``optimizer.step()``, as mmengine's
    ``compile=True`` does (it compiles ``train_step``), and torch's
    ``add_param_group``, which compares each group with all before it, reads
    them several times slower.

    Args:
        optim_wrapper_cfg (dict): Optimizer wrapper config, as for
            :class:`~mmengine.optim.DefaultOptimWrapperConstructor`.
        paramwise_cfg (dict, optional): mmengine's parameter-wise options,
            plus ``activation_decay_mult`` (float, >= 0, default 0.0).
    """

    def __init__(self,
                 optim_wrapper_cfg: dict,
                 paramwise_cfg: Optional[dict] = None) -> None:
        paramwise_cfg = dict(paramwise_cfg or {})
        mult = paramwise_cfg.pop('activation_decay_mult', 0.0)
        if isinstance(mult, bool) or not isinstance(
                mult, (int, float)) or not mult >= 0:
            raise ValueError('paramwise_cfg.activation_decay_mult must be a '
                             f'float >= 0, got {mult!r}')
        # mmengine puts all parameters in one group when paramwise_cfg is
        # empty; per-parameter groups are needed to exempt some of them.
        super().__init__(optim_wrapper_cfg, paramwise_cfg
                         or dict(custom_keys={}))
        # mmengine's __call__ copies it and adds the param groups
        self.optimizer_cfg = dict(self.optimizer_cfg)
        self.activation_decay_mult = float(mult)

    def add_params(self,
                   params: List[dict],
                   module: nn.Module,
                   prefix: str = '',
                   is_dcn_module: Optional[Union[int, float]] = None) -> None:
        """Add the groups of ``module`` (mmengine's rules), then scale the
        weight decay of its declared activation parameters.

        Args:
            params (list[dict]): Param groups, extended in place.
            module (nn.Module): The module whose parameters are added.
            prefix (str): Name of ``module`` in the model.
            is_dcn_module (int | float, optional): Passed through to
                mmengine (deformable-conv offset handling).
        """
        first = len(params)
        super().add_params(params, module, prefix, is_dcn_module)
        if not isinstance(module, LearnableActivation):
            return
        own = dict(module.named_parameters(recurse=False))
        declared = {
            id(own[name])
            for name in module.no_decay_params if name in own
        }
        # the groups after `first` also hold the children's parameters;
        # only this module's own declared ones are changed here
        for group in params[first:]:
            if id(group['params'][0]) not in declared:
                continue
            if self.base_wd is not None:
                decay = group.get('weight_decay', self.base_wd)
                group['weight_decay'] = decay * self.activation_decay_mult
            elif self.activation_decay_mult == 0:
                # no base weight decay configured: make "none" explicit, as
                # some optimizers (AdamW) decay by default
                group['weight_decay'] = 0.0
