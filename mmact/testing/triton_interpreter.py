"""Triton's interpreter before 3.8 on numpy >= 2.4: kernel scalars as
indices.

Triton's interpreter (``TRITON_INTERPRET=1``) keeps every kernel scalar as a
1-element array. Before Triton 3.8 it makes ``tl.tensor.__index__``
``int(data)``, which numpy >= 2.4 refuses ("only 0-dimensional arrays can be
converted to Python scalars"; numpy 1.25 to 2.3 warn), so every ``range``
over a runtime bound fails in the interpreter. Triton 3.8 squeezes the array
first; :func:`patch_scalar_index` gives the interpreters of Triton 3.0 to 3.7
the same, for the tests that run mmact's kernels there. Only the
interpreter's own code changes: compiled kernels never run it.
"""
import functools
import os
from typing import Tuple

from mmact.compat import parse_version, triton_version

__all__ = [
    'FIXED_IN', 'interpreter_enabled', 'needs_scalar_index_patch',
    'patch_scalar_index'
]

#: The first Triton whose interpreter squeezes a scalar before ``int``.
FIXED_IN = (3, 8)
#: The first Triton whose interpreter runs mmact's kernels
#: (:func:`mmact.compat.triton_interpreter_available`).
FIRST_INTERPRETER = (3, 0)


def interpreter_enabled() -> bool:
    """Whether ``TRITON_INTERPRET`` turns Triton's interpreter on (the
    values Triton's ``env_bool`` accepts)."""
    value = os.environ.get('TRITON_INTERPRET', '0').strip().lower()
    return value in ('1', 'true', 'yes', 'on', 'y')


def needs_scalar_index_patch(version: Tuple[int, ...],
                             interpret: bool) -> bool:
    """Whether Triton ``version`` with the interpreter on ``interpret`` needs
    :func:`patch_scalar_index`.

    Args:
        version (tuple[int]): Triton's version, ``()`` when none is
            installed.
        interpret (bool): Whether the interpreter is on.
    """
    return interpret and FIRST_INTERPRETER <= tuple(version[:2]) < FIXED_IN


def _squeezed_index(self) -> int:
    # Triton 3.8's: a kernel scalar is a 1-element array.
    return int(self.handle.data.squeeze())


def patch_scalar_index() -> bool:
    """Make the interpreter's ``tl.tensor.__index__`` squeeze, as Triton 3.8
    does, where :func:`needs_scalar_index_patch` says so; otherwise change
    nothing (and import nothing).

    The interpreter sets ``__index__`` at each launch
    (``_patch_lang_tensor``; the releases with a ``_LangPatchScope``
    restore it after the launch), so that function is wrapped: it sets
    Triton's attributes, then the squeezing ``__index__`` the same way.

    Returns:
        bool: Whether this process's interpreter has the patch.
    """
    if not needs_scalar_index_patch(triton_version(), interpreter_enabled()):
        return False
    import triton
    from triton.runtime import interpreter

    # The metadata can name another copy than the one imported (a copy on
    # PYTHONPATH beside an installed one without metadata).
    if not needs_scalar_index_patch(parse_version(triton.__version__), True):
        return False
    original = interpreter._patch_lang_tensor
    if getattr(original, 'squeezes_scalars', False):
        return True

    @functools.wraps(original)
    def patch_lang_tensor(tensor, *args, **kwargs):
        original(tensor, *args, **kwargs)
        scope = args[0] if args else kwargs.get('scope')
        if scope is None:  # no scope: set for good, as Triton does
            tensor.__index__ = _squeezed_index
        else:
            scope.set_attr(tensor, '__index__', _squeezed_index)

    patch_lang_tensor.squeezes_scalars = True
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True
