"""Put mmact's drop-in hooks in the place of mmengine's stock ones."""
from mmengine.config import Config, ConfigDict

__all__ = ['replace_stock_hook']

# What mmengine's Runner builds for a default hook the config leaves out.
_RUNNER_DEFAULTS = dict(
    checkpoint=dict(type='CheckpointHook', interval=1),
    logger=dict(type='LoggerHook'))


def replace_stock_hook(cfg: Config, key: str, ours: str) -> None:
    """Make ``default_hooks[key]`` of type ``ours`` when it is mmengine's
    stock hook (named in the config, or the Runner's default), keeping its
    arguments.

    Another type, a built hook object or ``None`` (the hook switched off) is
    left as is: the config asked for it.

    Args:
        cfg (Config): Updated in place.
        key (str): ``'checkpoint'`` or ``'logger'``.
        ours (str): Registered type of a subclass of the stock hook.
    """
    if key not in _RUNNER_DEFAULTS:
        raise ValueError(f'key must be one of {sorted(_RUNNER_DEFAULTS)}, '
                         f'got {key!r}')
    hooks = cfg.setdefault('default_hooks', ConfigDict())
    hook = hooks.get(key, _RUNNER_DEFAULTS[key])
    stock = _RUNNER_DEFAULTS[key]['type']
    if isinstance(hook,
                  dict) and hook.get('type') in (stock, f'mmengine.{stock}'):
        hooks[key] = dict(hook, type=ours)
