# SE-ResNet-50 (ReLU) on ImageNet-LT, the long-tailed baseline of Alexandridis
# et al. 2025 (Sec. V-B, Table XV): 200 epochs, SGD lr 0.2 for batch 256 (8
# GPUs x 32), warm-up + cosine, weight decay 1e-4 (none on biases), mixup 0.2,
# AutoAugment, cosine-normalised classifier with scale 16.
# Paper (Table II): 56.0 top-1 (Many 66.2, Medium 53.1, Few 37.1), with
# post-compensated softmax (PC-Softmax, Table XIX: +5.4pp): the head predicts
# from logits - log(training prior). ShotAccuracy splits top-1 into Many /
# Medium / Few classes. Data: the ImageNet-LT split files (Liu et al., "Large-Scale
# Long-Tailed Recognition in an Open World") in data/imagenet/meta/, their
# paths relative to data/imagenet/ (train/<wnid>/<file>.JPEG,
# val/<wnid>/<file>.JPEG).
_base_ = './se-relu-r50_8xb32-coslr-100e_in1k.py'

train_ann_file = 'data/imagenet/meta/ImageNet_LT_train.txt'
model = dict(
    head=dict(
        _delete_=True,
        # Cosine-normalised classifier as the authors' ImageNet-LT models
        # (GitHub kostas1515/AGLU, classification/resnet_cifar.py,
        # CosNorm_Classifier; Liu et al. 2019): 16 * <x / (1 + |x|),
        # w / |w|>, no bias. PC-Softmax: predictions (val/test) from
        # logits - log(training prior); training and the checkpoint keys are
        # those of CosNormClsHead (head.fc.weight).
        type='PCSoftmaxCosNormClsHead',
        train_ann_file=train_ann_file,
        num_classes=1000,
        in_channels=2048,
        scale=16.0,
        loss=dict(type='CrossEntropyLoss', loss_weight=1.0, use_soft=True)))

train_dataloader = dict(
    dataset=dict(
        ann_file='meta/ImageNet_LT_train.txt', data_prefix=dict(img_path='')))
val_dataloader = dict(
    dataset=dict(
        ann_file='meta/ImageNet_LT_val.txt', data_prefix=dict(img_path='')))
test_dataloader = dict(
    batch_size=32,
    num_workers=5,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='ImageNet',
        data_root='data/imagenet/',
        ann_file='meta/ImageNet_LT_test.txt',
        data_prefix=dict(img_path=''),
        pipeline=_base_.test_pipeline))

# top-1/top-5, and top-1 on Many (> 100 training images), Medium (20-100) and
# Few (< 20) classes as in the paper's Table II
val_evaluator = [
    dict(type='Accuracy', topk=(1, 5)),
    dict(type='ShotAccuracy', train_ann_file=train_ann_file),
]
test_evaluator = val_evaluator

optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.2, momentum=0.9, weight_decay=1e-4),
    paramwise_cfg=dict(bias_decay_mult=0.0))
# 5 warm-up epochs, then cosine (mmpretrain's imagenet_bs256_200e_coslr_warmup)
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=0.25,
        by_epoch=True,
        begin=0,
        end=5,
        convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=195, by_epoch=True, begin=5, end=200)
]
train_cfg = dict(max_epochs=200)
default_hooks = dict(checkpoint=dict(interval=20, max_keep_ckpts=3))
