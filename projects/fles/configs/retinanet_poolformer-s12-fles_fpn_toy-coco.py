# Toy run of the FleS RetinaNet config: the generated COCO-format set
# (`python tools/misc/generate_toy_data.py coco --out-dir data/`, 16 train /
# 8 val images of 160x128 with 8 classes of coloured shapes), from scratch
# (no ImageNet checkpoint), sized for two CPU cores. It checks that the
# project config trains and evaluates end to end; the mAP it prints says
# nothing about COCO accuracy.
_base_ = './retinanet_poolformer-s12-fles_fpn_1x_coco.py'

data_root = 'data/toy_coco/'
# The 8 categories the generator writes by default (COCO names and ids).
metainfo = dict(
    classes=('person', 'bicycle', 'car', 'motorcycle', 'airplane', 'bus',
             'train', 'truck'))
num_classes = len(metainfo['classes'])
image_scale = (160, 128)
max_epochs = 6

model = dict(
    # The dry run sees a toy-sized image; windows (9, 15) stay as in the
    # COCO config (the two deepest 10x8 / 5x4 maps clamp them to the map).
    input_shape=(1, 3, 128, 160),
    model=dict(
        backbone=dict(init_cfg=None),
        bbox_head=dict(num_classes=num_classes),
        # keep low-confidence boxes so that the short run is scored at all
        test_cfg=dict(score_thr=0.0, max_per_img=50)))

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
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

# Same optimizer as the COCO config (AdamW, weight decay 0.05, FleS biases
# without decay) at a lower peak LR for batch 2 from scratch (1e-3 diverged
# here), a short warm-up and cosine decay over the toy run (8 iterations per
# epoch).
optim_wrapper = dict(optimizer=dict(lr=2e-4), clip_grad=dict(max_norm=10.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=8),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=0,
        end=max_epochs,
        convert_to_iter_based=True)
]
train_cfg = dict(max_epochs=max_epochs, val_interval=max_epochs)
default_hooks = dict(
    logger=dict(interval=4),
    checkpoint=dict(interval=max_epochs, max_keep_ckpts=1))
auto_scale_lr = dict(enable=False, base_batch_size=2)
