# SE-ResNet-50 (ReLU) on ImageNet-1k with the recipe of paper 000, Sec. VI-A:
# 100 epochs, SGD lr 0.256 for batch 256 (8 GPUs x 32), cosine decay, weight
# decay 6e-6, mixup 0.2, AutoAugment, 224 random-resized crops.
# Paper (Table VI-a): 77.5 top-1. Its checkpoint, work_dirs/<this name>/
# epoch_100.pth, initialises the SE-R50 detectors under configs/.
_base_ = [
    'mmpretrain::_base_/models/resnet50.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_autoaug.py',
    'mmpretrain::_base_/schedules/imagenet_bs256_coslr.py',
    'mmpretrain::_base_/default_runtime.py',
    '../_base_/models/se-relu_resnet50.py',
    '../_base_/activation_nodecay.py',
]
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

model = dict(
    backbone=dict(_base_.se_relu_r50_cls, _delete_=True),
    head=dict(
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0, use_soft=True)),
    train_cfg=dict(augments=dict(type='Mixup', alpha=0.2)))

# Annotation files and image folders spelled out (instead of `split`) so that
# tools/train.py can name them when they are missing.
data_root = 'data/imagenet/'
train_dataloader = dict(
    batch_size=32,
    dataset=dict(
        data_root=data_root,
        split='',
        ann_file='meta/train.txt',
        data_prefix=dict(img_path='train/')))
val_dataloader = dict(
    batch_size=32,
    dataset=dict(
        data_root=data_root,
        split='',
        ann_file='meta/val.txt',
        data_prefix=dict(img_path='val/')))
test_dataloader = val_dataloader

optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.256, momentum=0.9, weight_decay=6e-6),
    paramwise_cfg=_base_.act_paramwise_cfg)
default_hooks = dict(checkpoint=dict(interval=10, max_keep_ckpts=3))
