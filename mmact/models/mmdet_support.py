"""mmact's components built on mmdet's models, and the error where mmdet's
models cannot be imported.

mmdet's model package imports mmcv's compiled ops (``mmcv.ops``, hence
``mmcv._ext``). Where they do not load (mmcv-lite, mmcv built without ops,
ops built for another torch, a build still running), ``import mmdet.models``
fails, while the activations, attention layers, mmpretrain backbones and
classifiers and the analysis tools need neither. The modules of
:data:`MMDET_COMPONENTS` import mmdet's models or mmcv's ops inside
:func:`importing_mmdet_models`, which turns that failure into
:class:`MmcvOpsMissingError`, naming their components, mmcv's compiled ops
and :data:`INSTALL_COMMAND`. :mod:`mmact.models.mmdet_components` imports
them all, or none, for mmdet's ``MODELS`` (:mod:`mmact.registry`).
"""
import contextlib
from typing import Dict, Iterator, Optional, Tuple

__all__ = [
    'MMDET_COMPONENTS', 'INSTALL_COMMAND', 'MmcvOpsMissingError',
    'importing_mmdet_models', 'mmcv_ops_error', 'require_mmdet_models'
]

#: Module -> the names its decorators register in mmdet's ``MODELS``: every
#: module of mmact that imports mmdet's models or mmcv's compiled ops.
MMDET_COMPONENTS: Dict[str, Tuple[str, ...]] = {
    'mmact.models.backbones.det_act_resnet':
    ('ActResNet', 'ActResNetV1d', 'ActResNeXt'),
    'mmact.models.layers.carafe': ('CARAFEUpsample', ),
    'mmact.models.losses.gol': ('GOLLoss', ),
    'mmact.models.roi_heads.carafe_mask_head': ('CARAFEMaskHead', ),
}

#: mmcv 2.1.0 with its compiled ops, built for the installed torch (the FAQ,
#: "mmdet's models need mmcv's compiled ops").
INSTALL_COMMAND = ('pip uninstall -y mmcv mmcv-lite && MMCV_WITH_OPS=1 pip '
                   'install --no-cache-dir --no-build-isolation mmcv==2.1.0')


class MmcvOpsMissingError(ImportError):
    """mmact's components on mmdet's models cannot be imported: mmcv's
    compiled ops do not load."""


def _is_mmcv_ops(error: ImportError) -> bool:
    name = error.name or ''
    if name in ('mmcv._ext', 'mmcv.ops') or name.startswith('mmcv.ops.'):
        return True
    # A compiled module that fails to load (undefined symbols) is named by
    # its last component only, with its path.
    return name == '_ext' and 'mmcv' in (error.path or '')


def mmcv_ops_error(error: BaseException) -> Optional[ImportError]:
    """The failed import of mmcv's compiled ops behind ``error``, if any.

    Args:
        error (BaseException): An error raised while importing.

    Returns:
        ImportError | None: The ``mmcv._ext`` / ``mmcv.ops`` import error in
        ``error``'s chain (itself, its cause or context); None when the
        failure has another cause.
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, ImportError) and _is_mmcv_ops(error):
            return error
        error = error.__cause__ or error.__context__
    return None


def _fix(error: ImportError) -> str:
    """What failed, what still works and the install command."""
    return (f'({type(error).__name__}: {error}). mmact\'s activations, '
            'attention layers and mmpretrain backbones and classifiers work '
            'without them. Install mmcv with its compiled ops: '
            f'{INSTALL_COMMAND} (docs/faq.md, "mmdet\'s models need mmcv\'s '
            'compiled ops").')


@contextlib.contextmanager
def importing_mmdet_models(module: str) -> Iterator[None]:
    """Import mmdet's models or mmcv's ops for ``module`` of
    :data:`MMDET_COMPONENTS`; a failure of mmcv's compiled ops becomes
    :class:`MmcvOpsMissingError` naming its components.

    Args:
        module (str): The importing module's ``__name__``.

    Raises:
        MmcvOpsMissingError: mmcv's compiled ops do not load. Other import
            errors pass unchanged.
    """
    try:
        yield
    except ImportError as error:
        cause = mmcv_ops_error(error)
        if cause is None:
            raise
        names = ', '.join(MMDET_COMPONENTS[module])
        raise MmcvOpsMissingError(
            f"{module} ({names} in mmdet's registry) needs mmdet's models, "
            "which need mmcv's compiled ops (mmcv._ext); they do not load "
            f'here {_fix(cause)}') from error


def require_mmdet_models() -> None:
    """Import mmdet's models; where mmcv's compiled ops do not load, raise
    one error naming every component of :data:`MMDET_COMPONENTS`.

    Raises:
        MmcvOpsMissingError: mmcv's compiled ops do not load. Other import
            errors pass unchanged.
    """
    try:
        import mmdet.models  # noqa: F401
    except ImportError as error:
        cause = mmcv_ops_error(error)
        if cause is None:
            raise
        names = ', '.join(n for names in MMDET_COMPONENTS.values()
                          for n in names)
        raise MmcvOpsMissingError(
            "mmdet's models need mmcv's compiled ops (mmcv._ext), which do "
            "not load here: nothing builds from mmdet's registry, and "
            f"mmact's components there ({names}) are not registered "
            f'{_fix(cause)}') from error
