"""mmact.utils.class_names: where a model's class names come from, and
names that do not fit it refused."""
import pytest
from mmengine.config import Config

from mmact.utils.class_names import (ClassNamesError, model_num_classes,
                                     resolve_dataset_meta)


def detector(num_classes=3, **dataset) -> Config:
    return Config(
        dict(
            default_scope='mmdet',
            model=dict(
                rpn_head=dict(num_classes=1),  # class-agnostic: not counted
                roi_head=dict(
                    bbox_head=dict(num_classes=num_classes),
                    mask_head=dict(num_classes=num_classes))),
            test_dataloader=dict(
                dataset=dict(dict(type='CocoDataset'), **dataset))))


def test_the_heads_give_the_count():
    assert model_num_classes(
        detector(5)) == (5, 'model.roi_head.bbox_head.num_classes')
    cfg = detector(5)
    cfg.model.roi_head.mask_head.num_classes = 4
    with pytest.raises(ClassNamesError, match='mask_head.num_classes = 4'):
        model_num_classes(cfg)


def test_checkpoint_names_then_the_configs_then_numbered():
    cfg = detector(3, metainfo=dict(classes=('x', 'y', 'z')))
    names = resolve_dataset_meta(  # keys lower-cased, as mmdet's
        cfg, dict(dataset_meta=dict(CLASSES=('a', 'b', 'c'))))
    assert names.meta == dict(classes=('a', 'b', 'c'), palette='random')
    assert names.source == "the checkpoint's meta['dataset_meta']"
    # mmdet 2.x checkpoints
    assert resolve_dataset_meta(
        cfg, dict(CLASSES=['d', 'e', 'f'])).meta['classes'] == ('d', 'e', 'f')
    names = resolve_dataset_meta(cfg, dict(epoch=3))
    assert names.meta['classes'] == ('x', 'y', 'z')
    assert names.source == 'test_dataloader.dataset.metainfo'
    names = resolve_dataset_meta(detector(3, type='BaseDetDataset'), None)
    assert names.numbered
    assert names.meta['classes'] == ('class 0', 'class 1', 'class 2')
    assert names.source == \
        'test_dataloader.dataset (BaseDetDataset) names none'


def test_a_palette_of_too_few_colours_is_replaced():
    palette = [(1, 2, 3), (4, 5, 6)]
    cfg = detector(2)
    meta = dict(dataset_meta=dict(classes=['a', 'b'], palette=palette))
    assert resolve_dataset_meta(cfg, meta).meta['palette'] == palette
    meta['dataset_meta']['palette'] = palette[:1]
    assert resolve_dataset_meta(cfg, meta).meta['palette'] == 'random'


def test_names_of_another_count_are_refused():
    with pytest.raises(ClassNamesError) as error:
        resolve_dataset_meta(detector(3), None)  # COCO's 80
    assert str(error.value).startswith(
        'CocoDataset.METAINFO names 80 classes, but the config\'s model '
        'predicts 3 (model.roi_head.bbox_head.num_classes = 3)')
