"""The class names a detector or classifier of a config predicts.

A checkpoint written by ``tools/train.py`` (mmengine's Runner) or by
``tools/model_converters/apa_to_mmact.py`` carries them as
``meta['dataset_meta']`` (``classes``, ``palette``); mmdet's
``DetInferencer`` falls back to COCO's 80 names without them, and a label
of 80 or more then stops its drawing with an ``IndexError``.
:func:`resolve_dataset_meta` takes, in order, the checkpoint's names, those
of the config's test dataset (:func:`config_dataset_meta`: its
``metainfo``, its class's ``METAINFO`` such as LVIS v1's 1203 names, or
V3Det's label file under ``data_root`` when it exists), else numbered
names (``class 0``, ``class 1``, ...), always as many as the model predicts.
"""
import os.path as osp
from typing import Any, Mapping, NamedTuple, Optional, Sequence, Tuple

from mmengine.config import Config

__all__ = [
    'ClassNamesError', 'ClassNames', 'model_num_classes',
    'config_dataset_meta', 'resolve_dataset_meta'
]

# Where a checkpoint keeps them (mmengine's Runner, mmdet 3.x), and the key
# of mmdet 2.x checkpoints.
_META_KEY = 'dataset_meta'
_MMDET2_KEY = 'CLASSES'


class ClassNamesError(ValueError):
    """Class names that do not fit the model (another number of classes)."""


class ClassNames(NamedTuple):
    """What :func:`resolve_dataset_meta` found.

    Attributes:
        meta (dict): ``classes`` (a tuple of the model's class count) and
            ``palette`` (a list of RGB tuples, or ``'random'``).
        source (str): Where the names come from; numbered: why no source
            names them.
        numbered (bool): No source named them: ``class <i>``.
    """
    meta: dict
    source: str
    numbered: bool


def model_num_classes(cfg: Config) -> Tuple[Optional[int], str]:
    """The number of classes the config's model predicts, and its key.

    Args:
        cfg (Config): A full config.

    Returns:
        tuple: ``(count, 'model.roi_head.bbox_head.num_classes')``;
        ``(None, '')`` when the model sets no ``num_classes``.

    Raises:
        ClassNamesError: Heads of the model predict different counts.
    """
    from .preflight import head_num_classes
    heads = head_num_classes(cfg)
    counts = sorted({n for _, n in heads})
    if len(counts) > 1:
        raise ClassNamesError(
            'the heads of the model predict different numbers of classes: ' +
            ', '.join(f'{key} = {n}' for key, n in heads))
    return (counts[0], heads[0][0]) if heads else (None, '')


def _test_dataset(cfg: Config) -> Tuple[Optional[dict], str]:
    """The first dataset that reads files of the test (else val, train)
    dataloader, through wrappers, and its config key."""
    from .preflight.data_paths import _leaf_datasets
    for split in ('test', 'val', 'train'):
        loader = cfg.get(f'{split}_dataloader')
        if isinstance(loader, dict):
            for where, dataset in _leaf_datasets(
                    loader.get('dataset'), f'{split}_dataloader.dataset'):
                return dataset, where
    return None, ''


def _label_file(dataset: dict, cls: Optional[type]) -> Optional[str]:
    """The class-name file a dataset reads (V3Det's ``label_file``, joined
    with ``data_root`` as ``V3DetDataset`` joins it), None for others."""
    from .preflight.data_paths import _default
    name = dataset.get('label_file', _default(cls, 'label_file'))
    if not isinstance(name, str) or not name:
        return None
    return osp.join(dataset.get('data_root') or '', name)


def config_dataset_meta(cfg: Config) -> Tuple[Optional[dict], str]:
    """Class names (and palette) of the config's test dataset.

    From the dataset config's ``metainfo.classes``, else its class-name file
    (V3Det's ``label_file`` under ``data_root``) when it exists, else its
    class's ``METAINFO``.

    Args:
        cfg (Config): A full config.

    Returns:
        tuple: ``({'classes': (...), 'palette': ...}, source)``, or ``(None,
        why)`` when the config names no classes here (e.g. V3Det's label
        file is absent).
    """
    from .preflight.data_paths import _dataset_class
    dataset, where = _test_dataset(cfg)
    if dataset is None:
        return None, 'the config has no dataloader'
    try:
        cls = _dataset_class(dataset, cfg.get('default_scope'))
    except KeyError:
        cls = None
    metainfo = dataset.get('metainfo') or {}
    if metainfo.get('classes'):
        return _meta(metainfo), f'{where}.metainfo'
    label_file = _label_file(dataset, cls)
    if label_file is not None:
        if not osp.isfile(label_file):
            return None, (f'{label_file} ({where}.label_file, one class name '
                          'a line) does not exist')
        from mmengine import list_from_file
        return dict(classes=tuple(list_from_file(label_file))), label_file
    metainfo = getattr(cls, 'METAINFO', None) or {}
    if metainfo.get('classes'):
        return _meta(metainfo), f'{cls.__name__}.METAINFO'
    name = dataset.get('type')
    return None, f'{where} ({getattr(name, "__name__", name)}) names none'


def _meta(metainfo: Mapping[str, Any]) -> dict:
    meta = dict(classes=tuple(metainfo['classes']))
    if metainfo.get('palette'):
        meta['palette'] = [tuple(c) for c in metainfo['palette']]
    return meta


def _checkpoint_classes(
        checkpoint_meta: Optional[Mapping]) -> Optional[Tuple[dict, str]]:
    if not isinstance(checkpoint_meta, Mapping):
        return None
    dataset_meta = checkpoint_meta.get(_META_KEY)
    if isinstance(dataset_meta, Mapping):
        meta = {str(k).lower(): v for k, v in dataset_meta.items()}
        if meta.get('classes'):
            return meta, f"the checkpoint's meta['{_META_KEY}']"
    if checkpoint_meta.get(_MMDET2_KEY):
        return (dict(classes=checkpoint_meta[_MMDET2_KEY]),
                f"the checkpoint's meta['{_MMDET2_KEY}']")
    return None


def _with_palette(meta: dict) -> dict:
    """``meta`` with a palette of one colour per class (mmdet's seeded
    ``'random'`` where it has none or too few)."""
    meta = dict(meta, classes=tuple(meta['classes']))
    palette = meta.get('palette')
    if not isinstance(palette, Sequence) or isinstance(
            palette, str) or len(palette) < len(meta['classes']):
        meta['palette'] = 'random'
    else:
        meta['palette'] = [tuple(c) for c in palette]
    return meta


def resolve_dataset_meta(cfg: Config,
                         checkpoint_meta: Optional[Mapping]) -> ClassNames:
    """The names to draw and write the model's predictions with.

    Args:
        cfg (Config): The model's config.
        checkpoint_meta (Mapping, optional): The checkpoint's ``meta``.

    Returns:
        ClassNames: Names from the checkpoint, else the config's test dataset,
        else numbered; as many as the model predicts.

    Raises:
        ClassNamesError: The checkpoint's (or the config's dataset's) names
            are not as many as the model's classes.
    """
    count, key = model_num_classes(cfg)
    found = _checkpoint_classes(checkpoint_meta)
    why = ''
    if found is None:
        meta, source = config_dataset_meta(cfg)
        if meta is None:
            why = source
        else:
            found = meta, source
    if found is not None:
        meta, source = found
        if count is not None and len(meta['classes']) != count:
            raise ClassNamesError(
                f'{source} names {len(meta["classes"])} classes, but the '
                f"config's model predicts {count} ({key} = {count}): a "
                'checkpoint of another dataset or model?')
        return ClassNames(_with_palette(meta), source, False)
    if count is None:
        raise ClassNamesError(
            'neither the checkpoint nor the config names the classes '
            f'({why}), and the model sets no num_classes to number them')
    classes = tuple(f'class {i}' for i in range(count))
    return ClassNames(dict(classes=classes, palette='random'), why, True)
