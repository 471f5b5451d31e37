"""Turn a full-size config into a seconds-long run on a generated dataset.

:func:`adapt_config` keeps everything that makes a config what it is -- the
model, its losses and hooks, the optimizer and its ``paramwise_cfg``, dataset
types and wrappers (RFS), the transforms and the evaluator type -- and changes
only what cannot run here: the dataset root (the toy generators of
:mod:`mmact.testing.toy_data` write the stock layouts), the class count, the
pretrained weights, image sizes, batch sizes, workers, the number of
proposals / RoIs / detections per image, the test score threshold (0, so an
untrained detector still outputs boxes) and the length of training. Used by ``tests/test_configs`` to train every shipped config for
two iterations and evaluate it.

Example:
    >>> from mmengine.config import Config
    >>> from mmengine.runner import Runner
    >>> cfg = Config.fromfile('configs/lvis/apa_mrcnn_r50.py')
    >>> kind = config_data_kind(cfg)                          # 'lvis'
    >>> root = generate_toy_data('lvis', '/tmp/toy_lvis', num_classes=20)
    >>> small = adapt_config(cfg, root, num_classes=20, work_dir='/tmp/w')
    >>> Runner.from_cfg(small).train()
"""
import copy
import os.path as osp
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from mmengine.config import Config, ConfigDict

from .toy_data import toy_classes

__all__ = ['DATASET_KINDS', 'adapt_config', 'config_data_kind',
           'drop_pretrained']

#: Dataset class name -> toy format of :func:`mmact.testing.toy_classes`.
DATASET_KINDS = {
    'CocoDataset': 'coco',
    'LVISV1Dataset': 'lvis',
    'LVISDataset': 'lvis',
    'V3DetDataset': 'v3det',
    'Objects365V2Dataset': 'objects365',
    'ImageNet': 'cls',
    'CustomDataset': 'cls',
}

_SPLITS = ('train', 'val', 'test')
# Transforms whose size arguments are shrunk.
_SIZED = ('Resize', 'RandomResize', 'RandomChoiceResize', 'FixShapeResize',
          'ResizeEdge', 'RandomResizedCrop', 'CenterCrop', 'RandomCrop',
          'Pad', 'EfficientNetRandomCrop', 'EfficientNetCenterCrop')


def _type_name(cfg: dict) -> str:
    name = cfg.get('type', '')
    name = name if isinstance(name, str) else getattr(name, '__name__', '')
    return name.split('.')[-1]


def _leaf_datasets(dataset: dict) -> Iterator[dict]:
    """Datasets that read files, through wrappers (RFS, repeat, concat)."""
    if 'datasets' in dataset:
        for child in dataset['datasets']:
            yield from _leaf_datasets(child)
    elif 'dataset' in dataset:
        yield from _leaf_datasets(dataset['dataset'])
    else:
        yield dataset


def _loaders(cfg: Config) -> Iterator[Tuple[str, dict]]:
    for split in _SPLITS:
        loader = cfg.get(f'{split}_dataloader')
        if loader:
            yield split, loader


def config_data_kind(cfg: Config) -> str:
    """The toy format matching the datasets of ``cfg``.

    Args:
        cfg (Config): A full runner config.

    Returns:
        str: One of ``'coco'``, ``'lvis'``, ``'v3det'``, ``'objects365'``,
        ``'cls'``.

    Raises:
        ValueError: No dataloader, an unknown dataset type, or datasets of
            different formats in one config.
    """
    kinds = set()
    for _, loader in _loaders(cfg):
        for dataset in _leaf_datasets(loader['dataset']):
            name = _type_name(dataset)
            if name not in DATASET_KINDS:
                raise ValueError(
                    f'dataset type {name!r} has no toy counterpart; known: '
                    f'{sorted(DATASET_KINDS)}')
            kinds.add(DATASET_KINDS[name])
    if len(kinds) != 1:
        raise ValueError(f'expected one dataset format, found {kinds or None}')
    return kinds.pop()


def drop_pretrained(node: Any) -> List[str]:
    """Remove every ``Pretrained`` init (and legacy ``pretrained=``) in place.

    Args:
        node: A (model) config, walked recursively.

    Returns:
        list[str]: The checkpoints that were named.
    """
    dropped: List[str] = []
    if isinstance(node, dict):
        init = node.get('init_cfg')
        if isinstance(init, dict) and init.get('type') == 'Pretrained':
            dropped.append(str(init.get('checkpoint')))
            node['init_cfg'] = None
        elif isinstance(init, (list, tuple)):
            keep = [
                item for item in init if not (isinstance(item, dict) and
                                              item.get('type') == 'Pretrained')
            ]
            dropped += [
                str(item.get('checkpoint')) for item in init
                if isinstance(item, dict) and item.get('type') == 'Pretrained'
            ]
            node['init_cfg'] = keep or None
        if isinstance(node.get('pretrained'), str):
            dropped.append(node['pretrained'])
            node['pretrained'] = None
        for key, value in node.items():
            if key != 'init_cfg':
                dropped += drop_pretrained(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            dropped += drop_pretrained(value)
    return dropped


def _set_num_classes(node: Any, num_classes: int) -> int:
    """Set every integer ``num_classes`` below ``node``; return the count."""
    count = 0
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'num_classes' and isinstance(value, int) \
                    and not isinstance(value, bool):
                node[key] = num_classes
                count += 1
            else:
                count += _set_num_classes(value, num_classes)
    elif isinstance(node, (list, tuple)):
        for value in node:
            count += _set_num_classes(value, num_classes)
    return count


# Per-image box budgets of detector train/test cfgs, capped so that heads see
# tens of RoIs instead of thousands (the toy images hold 1-4 objects).
_ROI_CAPS = {'nms_pre': 100, 'max_per_img': 20, 'num': 32, 'max_num': 20}


def _cap_rois(node: Any) -> None:
    """Cap proposal / detection / sampler counts below ``node`` in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            cap = _ROI_CAPS.get(key)
            if cap is not None and isinstance(value, int) \
                    and not isinstance(value, bool) and value > cap:
                node[key] = cap
            else:
                _cap_rois(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _cap_rois(value)


def _set_key(node: Any, key: str, value: Any) -> None:
    """Set every ``key`` below ``node`` to ``value`` in place."""
    if isinstance(node, dict):
        for name, child in node.items():
            if name == key:
                node[name] = value
            else:
                _set_key(child, key, value)
    elif isinstance(node, (list, tuple)):
        for child in node:
            _set_key(child, key, value)


def _model_cfgs(node: Any) -> Iterator[Tuple[str, Any]]:
    """Every ``train_cfg`` / ``test_cfg`` inside a model config."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ('train_cfg', 'test_cfg'):
                yield key, value
            else:
                yield from _model_cfgs(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _model_cfgs(value)


def _zero_score_thr(node: Any) -> None:
    """Set every ``score_thr`` below ``node`` to 0 in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'score_thr' and isinstance(value, (int, float)):
                node[key] = 0.0
            else:
                _zero_score_thr(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            _zero_score_thr(value)


def _fit(size: Sequence[int], box: Sequence[int]) -> Tuple[int, int]:
    """Scale a (w, h) size down to fit ``box``, keeping its aspect ratio."""
    factor = min(box[0] / max(size), box[1] / min(size))
    return tuple(max(8, round(v * factor)) for v in size)


def _shrink_size(value: Any, image_scale: Sequence[int],
                 crop_size: int) -> Any:
    """Shrink one size argument: int (crop edge), (w, h), list of (w, h)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return max(8, round(value * crop_size / 224))
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return _fit(value, image_scale)
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(v, (list, tuple)) for v in value):
        return [_shrink_size(v, image_scale, crop_size) for v in value]
    return value


def _shrink_pipeline(pipeline: Any, image_scale: Sequence[int],
                     crop_size: int) -> None:
    """Shrink the size arguments of every transform, nested ones included."""
    if isinstance(pipeline, (list, tuple)):
        for item in pipeline:
            _shrink_pipeline(item, image_scale, crop_size)
        return
    if not isinstance(pipeline, dict):
        return
    if _type_name(pipeline) in _SIZED:
        for key in ('scale', 'scales', 'crop_size', 'size', 'img_scale'):
            if key in pipeline and pipeline[key] is not None:
                pipeline[key] = _shrink_size(pipeline[key], image_scale,
                                             crop_size)
    for key in ('transforms', 'policies'):
        if key in pipeline and not isinstance(pipeline[key], str):
            _shrink_pipeline(pipeline[key], image_scale, crop_size)


def _point_at(dataset: dict, kind: str, split: str, data_root: str,
              classes: Tuple[str, ...]) -> Tuple[str, str]:
    """Point one leaf dataset at the toy root; return (old, new) root."""
    old_root = dataset.get('data_root') or ''
    dataset['data_root'] = data_root
    if kind == 'cls':
        # ImageNet / ImageNet-LT annotation files differ; the toy set has
        # meta/{train,val}.txt (test uses val).
        name = 'train' if split == 'train' else 'val'
        dataset['split'] = ''
        dataset['ann_file'] = f'meta/{name}.txt'
        dataset['data_prefix'] = dict(img_path=f'{name}/')
    dataset['metainfo'] = dict(classes=classes)
    return old_root, data_root


def adapt_config(cfg: Config,
                 data_root: str,
                 num_classes: int,
                 work_dir: Optional[str] = None,
                 kind: Optional[str] = None,
                 image_scale: Sequence[int] = (128, 96),
                 crop_size: int = 64,
                 max_iters: int = 2,
                 batch_size: int = 2,
                 seed: int = 0) -> Config:
    """Return a copy of ``cfg`` that trains ``max_iters`` on a toy dataset.

    Args:
        cfg (Config): A full runner config (mmdet or mmpretrain).
        data_root (str): Root written by the matching toy generator.
        num_classes (int): Classes of the toy set; every integer
            ``num_classes`` of the model (heads, losses, data preprocessor)
            and the datasets' ``metainfo`` classes are set to it.
        work_dir (str, optional): Work dir of the run.
        kind (str, optional): Toy format; from the dataset types when None.
        image_scale (Sequence[int]): ``(w, h)`` box detection resize scales
            are fitted into (ratios between multi-scale entries are kept).
        crop_size (int): Classification crop; other integer sizes scale by
            ``crop_size / 224``.
        max_iters (int): Training iterations; validation runs once after.
        batch_size (int): Training batch size (validation uses 1).
        seed (int): Random seed.

    Returns:
        Config: The adapted copy (``cfg`` is unchanged).
    """
    cfg = copy.deepcopy(cfg)
    kind = kind or config_data_kind(cfg)
    classes = toy_classes(kind, num_classes)
    data_root = data_root.rstrip('/') + '/'

    roots = {}
    for split, loader in _loaders(cfg):
        for dataset in _leaf_datasets(loader['dataset']):
            old, new = _point_at(dataset, kind, split, data_root, classes)
            roots[old] = new
            _shrink_pipeline(dataset.get('pipeline'), image_scale, crop_size)
        loader['batch_size'] = batch_size if split == 'train' else 1
        loader['num_workers'] = 0
        loader['persistent_workers'] = False
    for split in ('val', 'test'):
        evaluator = cfg.get(f'{split}_evaluator')
        metrics = evaluator if isinstance(evaluator, (list, tuple)) else [
            evaluator
        ]
        for metric in metrics:
            ann_file = metric.get('ann_file') if metric else None
            if not ann_file:
                continue
            old = [r for r in roots if r and ann_file.startswith(r)]
            if not old:
                raise ValueError(
                    f'{split}_evaluator.ann_file {ann_file!r} is not under '
                    f'the data_root of the datasets ({sorted(roots)})')
            root = max(old, key=len)
            metric['ann_file'] = osp.join(roots[root], ann_file[len(root):])

    if kind == 'cls':
        # PC-Softmax heads and ShotAccuracy count the training split
        for split_key in ('model', 'val_evaluator', 'test_evaluator'):
            _set_key(cfg.get(split_key), 'train_ann_file',
                     osp.join(data_root, 'meta', 'train.txt'))
    found = _set_num_classes(cfg.get('model'), num_classes)
    if cfg.get('data_preprocessor') is not None:
        found += _set_num_classes(cfg.data_preprocessor, num_classes)
    if not found:
        raise ValueError('no num_classes in the model config')
    drop_pretrained(cfg.get('model'))
    # Swin refuses maps smaller than its attention window unless it pads
    # them (pad_small_map), and toy images give such maps.
    _set_key(cfg.get('model'), 'pad_small_map', True)
    # Wrapped models (e.g. model=dict(type=..., model=dict(...))) included.
    for key, node in _model_cfgs(cfg.get('model')):
        _cap_rois(node)
        if key == 'test_cfg':
            # An untrained detector scores below the usual 0.05 (RetinaNet
            # starts at its 0.01 prior); keep its boxes for the metric.
            _zero_score_thr(node)
    cfg.load_from = None
    cfg.resume = False

    cfg.train_cfg = ConfigDict(
        type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
    cfg.setdefault('val_cfg', ConfigDict(type='ValLoop'))
    cfg.log_processor = ConfigDict(
        type='LogProcessor', window_size=1, by_epoch=False)
    hooks = cfg.setdefault('default_hooks', ConfigDict())
    hooks['checkpoint'] = ConfigDict(
        type='CheckpointHook', interval=-1, by_epoch=False, save_last=False)
    if 'logger' in hooks:
        hooks['logger']['interval'] = 1
    if cfg.get('auto_scale_lr'):
        cfg.auto_scale_lr['enable'] = False
    cfg.randomness = ConfigDict(seed=seed, deterministic=False)
    cfg.launcher = 'none'
    if work_dir is not None:
        cfg.work_dir = work_dir
    return cfg
