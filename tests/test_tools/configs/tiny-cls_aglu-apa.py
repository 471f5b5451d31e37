# A seconds-long classifier for the tool tests: ActResNet-18 at 1/8 width
# with AGLU at every activation position and APA* channel attention, on the
# generated long-tailed set (mmact.testing.generate_toy_data('cls'), ImageNet
# layout under data/toy_cls). Random crops, flips, dropout and shuffling make
# every epoch draw from all random generators.
_base_ = ['mmpretrain::_base_/default_runtime.py']
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

data_root = 'data/toy_cls/'
num_classes = 4
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='ActResNet',
        depth=18,
        stem_channels=8,
        base_channels=8,
        out_indices=(3, ),
        act_cfg=dict(type='AGLU'),
        attention_cfg=dict(type='APASELayer', ratio=4)),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=num_classes,
        in_channels=64,
        loss=dict(type='CrossEntropyLoss'),
        topk=(1, )))
data_preprocessor = dict(
    num_classes=num_classes,
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    to_rgb=True)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=32, crop_ratio_range=(0.5, 1.0)),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='ResizeEdge', scale=32, edge='short'),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    batch_size=8,
    num_workers=0,
    dataset=dict(
        type='ImageNet',
        data_root=data_root,
        split='train',
        pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=8,
    num_workers=0,
    dataset=dict(
        type='ImageNet',
        data_root=data_root,
        split='val',
        pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.05, momentum=0.9, weight_decay=1e-4))
# An explicit end keeps the schedule of a run stopped early (max_epochs=1)
# the same as the full run's (mmengine would end it at max_epochs).
param_scheduler = dict(
    type='CosineAnnealingLR', T_max=2, by_epoch=True, begin=0, end=2)
train_cfg = dict(by_epoch=True, max_epochs=2, val_interval=1)
val_cfg = dict()
test_cfg = dict()
default_hooks = dict(
    logger=dict(interval=1), checkpoint=dict(interval=1, max_keep_ckpts=-1))
randomness = dict(seed=0, deterministic=True)
