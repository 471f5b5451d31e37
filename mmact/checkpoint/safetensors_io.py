"""Weights as ``.safetensors``: a format with no code in it at all.

Optional: ``pip install safetensors`` (or ``mmact[safetensors]``). A file is
recognised by its header (an 8-byte little-endian length, then a JSON
object), whatever its name, on every supported torch (torch 2.1's
``torch.load`` does not read the format). It holds a flat dict of tensors
and string metadata: weights, not a resumable training state.
"""
import json
import os
from typing import IO, Any, Dict, Mapping, Optional, Union

import torch

__all__ = [
    'is_safetensors', 'load_safetensors', 'load_safetensors_metadata',
    'save_safetensors'
]

_INSTALL = 'pip install safetensors (or pip install "mmact[safetensors]")'


def _require():
    try:
        import safetensors.torch
    except ImportError as error:
        raise ImportError(
            f'.safetensors weights need the safetensors package: {_INSTALL}'
        ) from error
    return safetensors.torch


def is_safetensors(f: Union[str, os.PathLike, IO[bytes]]) -> bool:
    """Whether ``f`` holds safetensors data (read from its first bytes).

    Args:
        f: A path or a seekable binary file (its position is kept).
    """
    if isinstance(f, (str, os.PathLike)):
        try:
            with open(f, 'rb') as file:
                head, size = file.read(9), os.fstat(file.fileno()).st_size
        except OSError:
            return False
    else:
        if not (hasattr(f, 'seek') and hasattr(f, 'tell')):
            return False
        position = f.tell()
        head = f.read(9)
        size = f.seek(0, os.SEEK_END)
        f.seek(position)
    if len(head) < 9 or head[8:9] != b'{':
        return False
    return 8 + int.from_bytes(head[:8], 'little') <= size


def _device(map_location: Any) -> str:
    if map_location is None:
        return 'cpu'
    if isinstance(map_location, (str, torch.device)):
        return str(map_location)
    raise ValueError(
        'map_location of a .safetensors file must be None, a device string '
        f'or a torch.device, got {map_location!r}')


def load_safetensors(f: Union[str, os.PathLike, IO[bytes]],
                     map_location: Any = None) -> Dict[str, torch.Tensor]:
    """Read the tensors of a safetensors file.

    Args:
        f: A path or a binary file.
        map_location: ``None`` (CPU), a device string or a ``torch.device``.

    Returns:
        dict: Name -> tensor, on the device ``map_location`` names.
    """
    backend = _require()
    device = _device(map_location)
    if isinstance(f, (str, os.PathLike)):
        return backend.load_file(os.fspath(f), device=device)
    tensors = backend.load(f.read())
    return {name: t.to(device) for name, t in tensors.items()}


def load_safetensors_metadata(
        path: Union[str, os.PathLike]) -> Dict[str, Any]:
    """Read the metadata of a safetensors file (its header only).

    :func:`save_safetensors` stores each value as JSON; a value that is not
    JSON (a file of another writer) is returned as its string. Needs no
    safetensors package.

    Args:
        path: A safetensors file.

    Returns:
        dict: The ``__metadata__`` of the header, empty when it has none.

    Raises:
        ValueError: ``path`` is not a safetensors file.
    """
    if not is_safetensors(path):
        raise ValueError(f'{os.fspath(path)} is not a safetensors file')
    with open(path, 'rb') as file:
        size = int.from_bytes(file.read(8), 'little')
        header = json.loads(file.read(size))
    metadata = {}
    for key, text in (header.get('__metadata__') or {}).items():
        try:
            metadata[key] = json.loads(text)
        except ValueError:
            metadata[key] = text
    return metadata


def save_safetensors(state_dict: Mapping[str, torch.Tensor],
                     path: Union[str, os.PathLike],
                     metadata: Optional[Mapping[str, Any]] = None) -> None:
    """Write a flat dict of tensors as safetensors.

    Args:
        state_dict (Mapping[str, Tensor]): Weights; tensors sharing memory
            are written as copies (the format has no aliasing).
        path: Output file.
        metadata (Mapping, optional): Stored as JSON strings in the file's
            header (the format keeps string metadata only).

    Raises:
        TypeError: A value is not a tensor (the format holds tensors only).
    """
    backend = _require()
    others = [k for k, v in state_dict.items() if not torch.is_tensor(v)]
    if others:
        raise TypeError('safetensors holds tensors only; these entries are '
                        f'not tensors: {others[:8]}')
    tensors, storages = {}, set()
    for key, value in state_dict.items():
        value = value.detach().contiguous()
        storage = value.untyped_storage().data_ptr()
        tensors[key] = value.clone() if storage in storages else value
        storages.add(storage)
    text = {k: json.dumps(v, default=str) for k, v in (metadata or {}).items()}
    backend.save_file(tensors, os.fspath(path), metadata=text)
