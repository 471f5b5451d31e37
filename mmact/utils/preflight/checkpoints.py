"""Check checkpoint files before a run loads them.

Only what can be judged without loading is judged here: a file that mmengine
would fetch (URL, ``torchvision://``, ``open-mmlab://``, ``s3://``, ...) is
left to mmengine; a local file must be complete in one of the two formats
``torch.load`` reads -- the zip archive of torch >= 1.6 or the legacy pickle
stream (``_use_new_zipfile_serialization=False``, the format of model-zoo
files written before torch 1.6).
"""
import os
import os.path as osp
import pickle
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional

import torch
from mmengine.config import Config
from mmengine.runner import CheckpointLoader

from ...checkpoint import is_safetensors

__all__ = [
    'is_remote_checkpoint', 'check_checkpoint', 'missing_pretrained_paths',
    'check_pretrained_paths'
]

_INTACT_HINT = ('nothing was loaded. Use an intact file, e.g. an earlier '
                'epoch_N.pth of the same work dir.')


def is_remote_checkpoint(path: str) -> bool:
    """Whether mmengine loads ``path`` with another loader than a local
    file's (a URL or a registered scheme such as ``torchvision://``).

    Args:
        path (str): Checkpoint path or URI.
    """
    local = CheckpointLoader._schemes.get('')
    return CheckpointLoader._get_checkpoint_loader(path) is not local


class _Stub:
    """Stands for any object of a legacy checkpoint while it is scanned."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass


class _LegacyScanner(pickle.Unpickler):
    """Reads the pickles of a legacy torch file without building objects.

    Nothing is imported or executed: every global is a :class:`_Stub`, and
    storages are only recorded as ``key -> bytes``.
    """

    def __init__(self, file) -> None:
        super().__init__(file)
        self.storage_bytes: Dict[str, int] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == 'torch' and name.endswith('Storage'):
            return ('storage', name)
        return _Stub

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and pid and pid[0] == 'storage':
            _, storage_type, key, _, numel = pid[:5]
            name = storage_type[1] if isinstance(storage_type, tuple) else ''
            with warnings.catch_warnings():  # TypedStorage is deprecated
                warnings.simplefilter('ignore')
                dtype = getattr(
                    getattr(torch, name, None), 'dtype', torch.uint8)
            itemsize = torch.empty(0, dtype=dtype).element_size()
            self.storage_bytes[str(key)] = int(numel) * itemsize
        return _Stub()


def _legacy_problem(path: str) -> Optional[str]:
    """Why ``path`` is not a complete legacy torch file (None if it is).

    The legacy format is: magic number, protocol version, system info, the
    pickled object (storages as persistent ids), the sorted storage keys,
    then per storage an 8-byte element count and its raw bytes.
    """
    with open(path, 'rb') as file:
        try:
            scanner = _LegacyScanner(file)
            if scanner.load() != torch.serialization.MAGIC_NUMBER:
                return 'not a torch checkpoint'
            for _ in range(3):  # protocol version, system info, the object
                scanner.load()
            keys = scanner.load()
        except Exception:  # any unpickling failure means a broken stream
            return 'truncated or not a torch checkpoint'
        if not isinstance(keys, list):
            return 'not a torch checkpoint'
        needed = file.tell() + sum(8 + scanner.storage_bytes.get(str(key), 0)
                                   for key in keys)
    size = os.path.getsize(path)
    if size < needed:
        return f'truncated ({size} of {needed} bytes)'
    return None


def _foreign_file(path: str) -> Optional[str]:
    """Why ``path`` is no checkpoint at all, when it is empty or a web page
    (what a failed save or download leaves); None otherwise."""
    if os.path.getsize(path) == 0:
        return (f'Checkpoint {path!r} is empty (0 bytes), not a torch '
                'checkpoint: a save or download that did not finish; '
                f'{_INTACT_HINT}')
    with open(path, 'rb') as file:
        head = file.read(512).lstrip().lower()
    if head.startswith((b'<!doctype html', b'<html', b'<head', b'<body')):
        return (f'Checkpoint {path!r} is a web page (HTML), not a torch '
                'checkpoint: the download saved an error or log-in page of '
                'the server; nothing was loaded. Download the file again '
                '(from the release page, or with the link it gives).')
    return None


def check_checkpoint(path: str, resume: bool = False) -> None:
    """Make sure a checkpoint file is complete before anything loads it.

    Remote checkpoints are left to mmengine, which fetches and checks them.
    A local file must be a complete zip archive (torch >= 1.6; a truncated
    download loses the central directory, a corrupt one fails the CRC), a
    complete legacy torch pickle, or safetensors weights.

    Args:
        path (str): Checkpoint path or URI.
        resume (bool): The run resumes from it, which needs the full state a
            training run writes (safetensors hold weights only).

    Raises:
        FileNotFoundError: The local file does not exist.
        ValueError: The file is empty, a web page, truncated, corrupt or
            not a checkpoint, or weights only where a resume needs the full
            state.
    """
    if is_remote_checkpoint(path):
        return
    if not osp.isfile(osp.expanduser(path)):
        raise FileNotFoundError(f'Checkpoint {path!r} does not exist.')
    path = osp.expanduser(path)
    foreign = _foreign_file(path)
    if foreign is not None:
        raise ValueError(foreign)
    if is_safetensors(path):
        if resume:
            raise ValueError(
                f'Checkpoint {path!r} holds weights only (safetensors): a '
                'resume needs the checkpoint a training run wrote (optimizer, '
                'schedulers, iteration). To start from these weights, use '
                'load_from without resume.')
        return
    if not zipfile.is_zipfile(path):
        problem = _legacy_problem(path)
        if problem is not None:
            raise ValueError(
                f'Checkpoint {path!r} is {problem}: neither a torch zip '
                'archive (no zip directory found) nor a complete legacy '
                f'torch file; {_INTACT_HINT}')
        return
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        bad = str(error)
    if bad is not None:
        raise ValueError(f'Checkpoint {path!r} is corrupt ({bad} fails its '
                         f'checksum); {_INTACT_HINT}')


class _PretrainedInit(NamedTuple):
    key: str  # config key of the checkpoint, e.g. model.backbone.init_cfg...
    checkpoint: str
    module: str  # the module it initialises, as a state-dict prefix
    owner: dict  # the config node holding the init_cfg


def _pretrained_inits(node,
                      where: str,
                      module: str = '') -> Iterator[_PretrainedInit]:
    """Every ``Pretrained`` init under ``node``."""
    if isinstance(node, dict):
        init = node.get('init_cfg')
        inits = init if isinstance(init, (list, tuple)) else [init]
        for i, item in enumerate(inits):
            if isinstance(item, dict) and item.get('type') == 'Pretrained' \
                    and item.get('checkpoint'):
                key = f'{where}.init_cfg' + (f'[{i}]' if isinstance(
                    init, (list, tuple)) else '')
                yield _PretrainedInit(f'{key}.checkpoint',
                                      str(item['checkpoint']), module, node)
        for name, value in node.items():
            if name != 'init_cfg':
                yield from _pretrained_inits(value, f'{where}.{name}',
                                             f'{module}{name}.')
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _pretrained_inits(value, f'{where}[{i}]',
                                         f'{module}{i}.')


def _producing_config(path: str) -> Optional[str]:
    """The config whose default work dir holds ``path``, when one exists.

    ``tools/train.py`` writes to ``work_dirs/<config name>/``; a checkpoint
    under such a folder comes from ``configs/**/<config name>.py``.
    """
    parts = Path(path).parts
    if 'work_dirs' not in parts:
        return None
    index = parts.index('work_dirs')
    if index + 2 >= len(parts):
        return None
    stem = parts[index + 1]
    for root in (Path('.'), Path(__file__).resolve().parents[3]):
        found = sorted((root / 'configs').glob(f'**/{stem}.py'))
        if found:
            return osp.relpath(found[0]) if root == Path('.') else \
                str(found[0])
    return None


def missing_pretrained_paths(cfg: Config) -> List[str]:
    """List the local ``Pretrained`` checkpoints ``cfg.model`` needs but lacks.

    Checkpoints mmengine fetches itself (URLs, ``torchvision://``,
    ``open-mmlab://``, ...) are left to it.

    Args:
        cfg (Config): A full runner config.

    Returns:
        list[str]: One line per missing file, naming the config key and,
        when a config of this repository writes the file, how to make it.
    """
    return [_missing_line(init) for init in _missing_inits(cfg)]


def _missing_inits(cfg: Config) -> List[_PretrainedInit]:
    return [
        init for init in _pretrained_inits(cfg.get('model'), 'model')
        if not (is_remote_checkpoint(init.checkpoint)
                or osp.isfile(osp.expanduser(init.checkpoint)))
    ]


def _missing_line(init: _PretrainedInit) -> str:
    line = f'{init.checkpoint} ({init.key})'
    producer = _producing_config(init.checkpoint)
    if producer is not None:
        line += (f'\n    written by training {producer}: '
                 f'tools/dist_train.sh {producer} 8')
    return line


def _state_dict_keys(path: str) -> List[str]:
    """The weight names of a checkpoint, as the Runner will load it."""
    checkpoint = CheckpointLoader.load_checkpoint(path, map_location='cpu')
    state = checkpoint.get('state_dict', checkpoint) if isinstance(
        checkpoint, dict) else {}
    return [re.sub(r'^module\.', '', str(key)) for key in state]


def check_pretrained_paths(cfg: Config) -> List[str]:
    """Raise one error listing every missing local pretrained checkpoint.

    mmengine's ``Pretrained`` init would otherwise fail only after the model
    is built and the work dir written, with a bare file-not-found error.
    A missing init whose module ``cfg.load_from`` holds weights for (a
    fine-tune from a full checkpoint, or a resume) is not needed: the Runner
    loads ``load_from`` after initialising, over those weights. That init is
    removed from ``cfg`` and named in the returned lines.

    Args:
        cfg (Config): A full runner config; updated in place.

    Returns:
        list[str]: One line per init skipped because ``load_from`` replaces
        it.

    Raises:
        FileNotFoundError: Some ``init_cfg=dict(type='Pretrained',
            checkpoint=...)`` names a local file that does not exist and
            ``load_from`` does not cover its module.
    """
    inits = _missing_inits(cfg)
    skipped = []
    if inits and cfg.get('load_from'):
        loaded = _state_dict_keys(cfg.load_from)
        for init in list(inits):
            if any(key.startswith(init.module) for key in loaded):
                init.owner['init_cfg'] = _without(init.owner['init_cfg'],
                                                  init.checkpoint)
                inits.remove(init)
                skipped.append(
                    f'{init.key} {init.checkpoint!r} does not exist; '
                    f'load_from {cfg.load_from!r} holds the '
                    f'{init.module}* weights it would initialise, so it is '
                    'skipped')
    missing = [_missing_line(init) for init in inits]
    if missing:
        raise FileNotFoundError(
            'Pretrained checkpoints of this config do not exist:\n' +
            '\n'.join(f'  {m}' for m in missing) +
            '\nTrain the backbone config named above (its final checkpoint '
            'lands at that path), copy or link an existing checkpoint there '
            '(reference-code weights: tools/model_converters/apa_to_mmact.py)'
            ', train from scratch with --cfg-options '
            'model.backbone.init_cfg=None, or fine-tune from a checkpoint '
            'that holds these weights with load_from.')
    return skipped


def _without(init_cfg, checkpoint: str):
    """``init_cfg`` less its ``Pretrained`` init from ``checkpoint``."""
    if isinstance(init_cfg, (list, tuple)):
        return [
            item for item in init_cfg
            if not (isinstance(item, dict)
                    and str(item.get('checkpoint')) == checkpoint)
        ]
    return None
