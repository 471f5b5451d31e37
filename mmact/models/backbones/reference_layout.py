"""Refuse checkpoints of the reference APA code in a ``Pretrained`` init.

mmengine's ``Pretrained`` init reads ``checkpoint['state_dict']`` (or the
dict itself) and loads with ``strict=False``: a checkpoint of the reference
APA code (weights under ``'model'``, keys like ``unirect1``) would match no
key and only log warnings. :func:`check_pretrained_layout` raises instead and
names the converter (``tools/model_converters/apa_to_mmact.py``).
"""
import re
from typing import Iterable, Optional

__all__ = ['CONVERTER', 'check_pretrained_layout', 'preview_keys']

CONVERTER = 'tools/model_converters/apa_to_mmact.py'

# Reference-only names: their presence means "convert me first".
_REFERENCE_MARKERS = ('unirect', '.se.excitation.', '.se.uniact.', '.se.norm.')


def preview_keys(keys: Iterable[str], n: int = 8) -> str:
    """The first ``n`` of ``keys`` in order, and how many more there are.

    Args:
        keys (Iterable[str]): State-dict keys.
        n (int): How many to show. Defaults to 8.
    """
    keys = sorted(keys)
    more = f' ... (+{len(keys) - n} more)' if len(keys) > n else ''
    return ', '.join(keys[:n]) + more


def check_pretrained_layout(checkpoint: dict,
                            model_keys: Iterable[str],
                            prefix: Optional[str] = None,
                            source: str = 'checkpoint') -> None:
    """Raise when a ``Pretrained`` init would silently load nothing.

    Args:
        checkpoint (dict): The loaded checkpoint object.
        model_keys (iterable[str]): ``state_dict()`` keys of the module.
        prefix (str, optional): ``init_cfg['prefix']``, e.g. ``'backbone.'``.
        source (str): Checkpoint path for the message.

    Raises:
        ValueError: The checkpoint has the reference layout, lacks the
            prefix, or none of its keys match the module.
    """
    fix = (f'convert it first: python {CONVERTER} {source} <out.pth>, then '
           'point init_cfg.checkpoint at <out.pth>')
    if not isinstance(checkpoint, dict):
        raise ValueError(f'{source}: expected a dict checkpoint, got '
                         f'{type(checkpoint).__name__}')
    if 'state_dict' in checkpoint:
        state_dict = checkpoint['state_dict']
    elif 'model' in checkpoint and isinstance(checkpoint['model'], dict):
        raise ValueError(
            f"{source} keeps its weights under 'model' (the reference APA "
            "code's layout); mmengine's Pretrained init reads only "
            "'state_dict' or a flat dict and would load nothing: " + fix)
    else:
        state_dict = checkpoint
    keys = [k for k in state_dict if isinstance(k, str)]
    reference = [k for k in keys if any(m in k for m in _REFERENCE_MARKERS)]
    if reference:
        raise ValueError(
            f'{source} uses the reference APA key names '
            f'({preview_keys(reference, 3)}), which mmact does not '
            'load directly: ' + fix)
    if prefix:
        pre = prefix if prefix.endswith('.') else prefix + '.'
        keys = [k[len(pre):] for k in keys if k.startswith(pre)]
        if not keys:
            raise ValueError(
                f"{source} has no key starting with prefix "
                f"{pre!r}; first keys: {preview_keys(state_dict)}")
    else:
        keys = [re.sub(r'^module\.', '', k) for k in keys]
    if not set(keys) & set(model_keys):
        raise ValueError(
            f'none of the {len(keys)} keys of {source} (after prefix '
            f'{prefix!r}) match the model; checkpoint keys: {preview_keys(keys)};'
            f' model keys: {preview_keys(model_keys)}')
