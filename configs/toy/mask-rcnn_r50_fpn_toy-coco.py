# Mask R-CNN R50-FPN trained from scratch on the generated COCO-format set
# (`python tools/misc/generate_toy_data.py`), sized to train and evaluate on
# two CPU cores in a few minutes. It checks the whole pipeline, not accuracy.
_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

data_root = 'data/toy_coco/'
# The 8 categories the generator writes by default (COCO names and ids).
metainfo = dict(classes=('person', 'bicycle', 'car', 'motorcycle', 'airplane',
                         'bus', 'train', 'truck'))
num_classes = len(metainfo['classes'])
image_scale = (160, 128)
max_epochs = 8

model = dict(
    # No ImageNet weights can be fetched here: train every stage, with BN
    # statistics from the batches.
    backbone=dict(frozen_stages=-1, norm_eval=False, init_cfg=None),
    roi_head=dict(
        bbox_head=dict(num_classes=num_classes),
        mask_head=dict(num_classes=num_classes)),
    train_cfg=dict(
        rpn=dict(sampler=dict(num=128)),
        rpn_proposal=dict(nms_pre=500, max_per_img=200),
        rcnn=dict(sampler=dict(num=64))),
    test_cfg=dict(
        rpn=dict(nms_pre=500, max_per_img=200),
        rcnn=dict(max_per_img=50)))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]
# Two cores: loading in the main process beats forking workers.
train_dataloader = dict(
    batch_size=2,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root, metainfo=metainfo, pipeline=train_pipeline))
val_dataloader = dict(
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root, metainfo=metainfo, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val2017.json')
test_evaluator = val_evaluator

train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=40),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[6],
        gamma=0.1)
]
optim_wrapper = dict(optimizer=dict(lr=0.02), clip_grad=dict(max_norm=10.0))
default_hooks = dict(
    logger=dict(interval=4),
    checkpoint=dict(interval=max_epochs, max_keep_ckpts=1))
auto_scale_lr = dict(enable=False, base_batch_size=2)
# A fixed seed makes the demo's numbers comparable between runs.
randomness = dict(seed=0)
