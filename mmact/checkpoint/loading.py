"""Load checkpoints without letting them run code.

:func:`safe_load` is ``torch.load`` through :mod:`.restricted_pickle` (or
safetensors), with one message for a refused global and clear errors for
files that are not checkpoints. :func:`safe_checkpoint_loading` routes every
``torch.load`` of the process through it while it is active -- mmengine's
``CheckpointLoader`` schemes (local files, ``http(s)://``,
``torchvision://``, ``open-mmlab://``, ``mmcls://``, ``pavi://``,
``s3://``, ...), the Runner's ``load_from`` and resume, ``init_cfg``
``Pretrained`` and ``torch.hub`` downloads alike -- and names the URI a
loader was given in its errors. mmact's tools run inside it; ``import
mmact`` alone does not enter it.
"""
import contextlib
import contextvars
import functools
import os
import os.path as osp
import pickle
import threading
import urllib.error
import zipfile
from typing import IO, Any, Callable, Iterable, Iterator, List, Optional, Union

import torch
from mmengine.runner import CheckpointLoader

from . import restricted_pickle
from .allow_list import RefusedGlobal
from .safetensors_io import is_safetensors, load_safetensors

__all__ = [
    'TRUST_FLAG', 'UnsafeCheckpointError', 'CheckpointLoadError', 'safe_load',
    'safe_checkpoint_loading', 'add_trust_argument'
]

#: The tools' command-line opt-out, one trusted file or URL per use.
TRUST_FLAG = '--trust-checkpoint'
_WHAT_IS_ALLOWED = ('tensors, containers, numpy arrays and scalars, '
                    "mmengine's HistoryBuffer, argparse.Namespace")
_TORCH_LOAD = torch.load  # the real one, also while it is replaced
FileLike = Union[str, os.PathLike, IO[bytes]]


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint needs something that unpickling it could run as code."""


class CheckpointLoadError(ValueError):
    """A file or URL that does not hold a loadable checkpoint."""


def _name(f: FileLike) -> str:
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)
    return getattr(f, 'name', None) or f'<{type(f).__name__}>'


def _where(f: FileLike, source: Optional[str]) -> str:
    """``'uri'``, with the file it was read from when that differs."""
    name = _name(f)
    if source is None or source == name:
        return repr(name)
    if isinstance(f, (str, os.PathLike)):
        return f'{source!r} (read from {name!r})'
    return repr(source)


def _refusal(f: FileLike, source: Optional[str], refused: str) -> str:
    return (f'checkpoint {_where(f, source)} needs {refused}, which is not on '
            f"mmact's allow-list of what a checkpoint may hold "
            f'({_WHAT_IS_ALLOWED}, ...): unpickling it could run code, so '
            'nothing was loaded. If you trust this file, load it with '
            f'{TRUST_FLAG} {source or _name(f)} (mmact tools) or trusted=... '
            '(mmact.checkpoint.safe_load / safe_checkpoint_loading).')


def _head(f: FileLike, size: int = 64) -> bytes:
    try:
        if isinstance(f, (str, os.PathLike)):
            with open(f, 'rb') as file:
                return file.read(size)
        position = f.tell()
        f.seek(0)
        head = f.read(size)
        f.seek(position)
        return head
    except (OSError, AttributeError, ValueError):
        return b''


def _what_it_is(head: bytes) -> str:
    text = head.lstrip().lower()
    if not head:
        return 'the file is empty'
    if text.startswith((b'<!doctype', b'<html', b'<?xml', b'<head')):
        return ('it is an HTML page, not a checkpoint (a URL that needs a '
                'login, or the address of a web page instead of the file)')
    if head.startswith(b'PK'):
        return ('it is a zip archive that is truncated or corrupt (a copy or '
                'a download cut short?)')
    if head.startswith(b'\x80'):
        return 'it is a pickle that is truncated or corrupt'
    return ('it is neither a torch zip archive nor a torch pickle (it '
            f'starts with {head[:16]!r})')


# torch's own words for an archive or a stream it cannot read
_FORMAT_FAILURES = ('PytorchStreamReader', 'unexpected EOF',
                    'file might be corrupted', 'zip archive',
                    'central directory')


def _is_format_failure(error: BaseException) -> bool:
    if isinstance(error, (EOFError, pickle.UnpicklingError)):
        return True
    return isinstance(error, RuntimeError) and any(
        text in str(error) for text in _FORMAT_FAILURES)


def _download_cache(f: FileLike, source: Optional[str]) -> Optional[str]:
    """The path of ``f`` when it is torch.hub's download of ``source``."""
    if source is None or not isinstance(f, (str, os.PathLike)):
        return None
    path = osp.realpath(f)
    cache = osp.realpath(osp.join(torch.hub.get_dir(), 'checkpoints'))
    return path if osp.dirname(path) == cache and '://' in source else None


def _unreadable(f: FileLike, source: Optional[str],
                error: BaseException) -> CheckpointLoadError:
    message = (f'checkpoint {_where(f, source)} cannot be loaded: '
               f'{_what_it_is(_head(f))} ({type(error).__name__}: {error})')
    download = _download_cache(f, source)
    if download is not None:
        # torch.hub reuses a cached download: drop this one, or every
        # later run would read the same broken file
        with contextlib.suppress(FileNotFoundError):
            os.remove(download)
        message += (f'. The downloaded copy {download} was removed; the next '
                    'load downloads it again')
    return CheckpointLoadError(message + '. Nothing was loaded.')


def _is_torchscript(f: FileLike) -> bool:
    """A TorchScript archive: ``torch.load`` hands it to ``torch.jit.load``,
    which runs the code it holds."""
    try:
        position = None if isinstance(f, (str, os.PathLike)) else f.tell()
        if not zipfile.is_zipfile(f):
            return False
        with zipfile.ZipFile(f) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, AttributeError):
        return False
    finally:
        if position is not None:
            f.seek(position)
    return any(
        name.count('/') == 1 and name.endswith('/constants.pkl')
        for name in names)


def safe_load(f: FileLike,
              map_location: Any = None,
              *,
              trusted: bool = False,
              source: Optional[str] = None,
              mmap: Optional[bool] = None,
              **pickle_load_args) -> Any:
    """``torch.load`` that refuses what could run code.

    Reads torch's zip and legacy formats through the allow-list
    (:mod:`mmact.checkpoint.allow_list`) on torch 2.1 to 2.14, and
    safetensors files (recognised by their header). TorchScript archives are
    refused: loading one runs its code.

    Args:
        f: A path or a binary file.
        map_location: As ``torch.load``'s.
        trusted (bool): Unpickle fully, as ``torch.load(weights_only=False)``:
            only for a file you trust. Defaults to False.
        source (str, optional): The URI ``f`` was fetched from, for messages.
        mmap (bool, optional): As ``torch.load``'s.
        **pickle_load_args: As ``torch.load``'s (``encoding``, ...).

    Returns:
        The unpickled object.

    Raises:
        UnsafeCheckpointError: The file needs a global outside the
            allow-list; the message names the file, the global and the
            opt-out.
        CheckpointLoadError: The file is not a readable checkpoint (empty,
            an HTML page, truncated, corrupt), named in the message.
    """
    if isinstance(f, os.PathLike):
        f = os.fspath(f)  # torch 2.1 maps str paths only
    if is_safetensors(f):
        return load_safetensors(f, map_location)
    options = dict(pickle_load_args, map_location=map_location)
    if mmap is not None:
        options['mmap'] = mmap
    if trusted:
        return _TORCH_LOAD(f, weights_only=False, **options)
    if _is_torchscript(f):
        raise UnsafeCheckpointError(
            _refusal(f, source, 'torch.jit.load (a TorchScript archive)'))
    try:
        return _TORCH_LOAD(
            f, pickle_module=restricted_pickle, weights_only=False, **options)
    except RefusedGlobal as refused:
        raise UnsafeCheckpointError(_refusal(f, source,
                                             refused.name)) from None
    except (EOFError, RuntimeError, pickle.UnpicklingError) as error:
        if _is_format_failure(error):
            raise _unreadable(f, source, error) from error
        raise


def _normalise(name: Union[str, os.PathLike]) -> str:
    name = os.fspath(name)
    return name if '://' in name else osp.realpath(osp.expanduser(name))


class _Guard:
    """What :func:`safe_checkpoint_loading` replaces, while any is open."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.trusted: List[frozenset] = []  # one set per open context
        self.schemes: dict = {}  # prefix -> mmengine's loader
        self.source = contextvars.ContextVar(
            'mmact_checkpoint_source', default=None)

    def is_trusted(self, f: FileLike, source: Optional[str]) -> bool:
        names = {_normalise(source)} if source else set()
        if isinstance(f, (str, os.PathLike)):
            names.add(_normalise(f))
        return any(names & trusted for trusted in self.trusted)

    def load(self,
             f: FileLike,
             map_location: Any = None,
             pickle_module: Any = None,
             *,
             weights_only: Optional[bool] = None,
             mmap: Optional[bool] = None,
             **pickle_load_args) -> Any:
        """``torch.load`` while a context is open: the caller's
        ``pickle_module`` and ``weights_only`` give way to the allow-list,
        unless the file is trusted."""
        source = self.source.get()
        return safe_load(
            f,
            map_location,
            trusted=self.is_trusted(f, source),
            source=source,
            mmap=mmap,
            **pickle_load_args)

    def named(self, loader: Callable) -> Callable:
        """An mmengine scheme loader that records the URI it was given."""

        @functools.wraps(loader)
        def load(filename: str, *args, **kwargs) -> Any:
            token = self.source.set(filename)
            try:
                return loader(filename, *args, **kwargs)
            except urllib.error.URLError as error:
                raise CheckpointLoadError(
                    f'checkpoint {filename!r} cannot be downloaded: '
                    f'{error}') from error
            finally:
                self.source.reset(token)

        return load

    def install(self) -> None:
        torch.load = torch.serialization.load = self.load
        self.schemes = dict(CheckpointLoader._schemes)
        for prefix, loader in self.schemes.items():
            CheckpointLoader.register_scheme(
                prefix, self.named(loader), force=True)

    def uninstall(self) -> None:
        torch.load = torch.serialization.load = _TORCH_LOAD
        for prefix, loader in self.schemes.items():
            CheckpointLoader.register_scheme(prefix, loader, force=True)
        self.schemes = {}


_GUARD = _Guard()


@contextlib.contextmanager
def safe_checkpoint_loading(trusted: Iterable[Union[str, os.PathLike]] = (
)) -> Iterator[None]:
    """Route every ``torch.load`` of the process through :func:`safe_load`.

    Covers mmengine's ``CheckpointLoader`` with every registered scheme
    (``load_from``, resume, ``init_cfg=dict(type='Pretrained')``,
    ``load_checkpoint``), ``torch.hub`` downloads and direct ``torch.load``
    calls, in every thread. Contexts nest; the last one to close gives
    ``torch.load`` back.

    Example:
        >>> from mmact.checkpoint import safe_checkpoint_loading
        >>> with safe_checkpoint_loading():
        ...     runner.train()  # doctest: +SKIP

    Args:
        trusted (Iterable[str]): Files or URIs (as given to the loader) to
            unpickle fully, as ``torch.load(weights_only=False)``: only
            files you trust. Defaults to none.
    """
    trust = frozenset(_normalise(name) for name in trusted)
    with _GUARD.lock:
        if not _GUARD.trusted:
            _GUARD.install()
        _GUARD.trusted.append(trust)
    try:
        yield
    finally:
        with _GUARD.lock:
            _GUARD.trusted.remove(trust)
            if not _GUARD.trusted:
                _GUARD.uninstall()


def add_trust_argument(parser) -> None:
    """Add the tools' ``--trust-checkpoint PATH_OR_URL`` option (repeatable).

    Args:
        parser (argparse.ArgumentParser): The tool's parser.
    """
    parser.add_argument(
        TRUST_FLAG,
        action='append',
        default=[],
        metavar='PATH_OR_URL',
        help='unpickle this checkpoint fully, which runs any code it holds: '
        'only for a file you trust (repeatable). Without it every checkpoint '
        "is read through mmact's allow-list (tensors, containers, numpy, "
        "mmengine's HistoryBuffer, argparse.Namespace) and refused if it "
        'needs anything else')
