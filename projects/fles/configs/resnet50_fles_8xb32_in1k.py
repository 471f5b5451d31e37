# ResNet-50 with FleS in place of every ReLU (stem, and act1/act2/act3 of
# each bottleneck; mmact's ActResNet), ImageNet-1k from scratch with the
# FleS paper's CNN recipe (App. G item 3): SGD, lr 0.1 at batch 256 (8 GPUs
# x 32), momentum 0.9, weight decay 1e-4, 120 epochs with 5 linear warm-up
# epochs and cosine decay to 1e-5, then 10 cool-down epochs at 1e-5;
# random-resized crops and flips. Paper (Tab. 3 / 13): 80.1 top-1 (ReLU:
# 77.2), 28.1M parameters; this model has 27.7M (see README).
_base_ = 'mmpretrain::resnet/resnet50_8xb32_in1k.py'
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

# Classification: whole-map indicator, shared-trunk MLP with r = 32.
fles_cls = dict(type='FleS', window_size=None, reduction=32)

# FleS infers its channel count lazily: MaterializedModel builds the
# classifier and runs one no-grad dry forward through the backbone (keys
# unchanged). The Runner would hand the top-level data_preprocessor to
# MaterializedModel, so it moves into the classifier.
model = dict(
    _delete_=True,
    type='MaterializedModel',
    input_shape=(1, 3, 224, 224),
    submodule='backbone',
    model=dict(
        _base_.model,
        data_preprocessor=_base_.data_preprocessor,
        backbone=dict(
            type='ActResNet',
            depth=50,
            num_stages=4,
            out_indices=(3, ),
            style='pytorch',
            act_cfg=fles_cls)))
data_preprocessor = None

# Annotation files and image folders spelled out (instead of `split`) so
# that tools/train.py can name them when they are missing.
data_root = 'data/imagenet/'
train_dataloader = dict(
    dataset=dict(
        data_root=data_root,
        split='',
        ann_file='meta/train.txt',
        data_prefix=dict(img_path='train/')))
val_dataloader = dict(
    dataset=dict(
        data_root=data_root,
        split='',
        ann_file='meta/val.txt',
        data_prefix=dict(img_path='val/')))
test_dataloader = val_dataloader

# FleS declares its biases (and indicator coefficients) in no_decay_params;
# the constructor gives them no decay, everything else keeps 1e-4.
optim_wrapper = dict(
    optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=1e-4),
    constructor='ActivationOptimWrapperConstructor')

warmup_epochs = 5
main_epochs = 120
cooldown_epochs = 10
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        end=warmup_epochs,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=warmup_epochs,
        end=main_epochs,
        convert_to_iter_based=True),
    # cool-down: the cosine schedule ends at eta_min and the LR stays there
]
train_cfg = dict(max_epochs=main_epochs + cooldown_epochs)
default_hooks = dict(checkpoint=dict(interval=10, max_keep_ckpts=3))
auto_scale_lr = dict(base_batch_size=256)
