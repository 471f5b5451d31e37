# PoolFormer-S12 with FleS in every token-MLP (replacing GELU), ImageNet-1k
# pretraining from scratch with the paper's recipe (FleS paper, App. G item 1):
# AdamW, lr 1e-3 at batch 1024 (8 GPUs x 128), weight decay 0.05, 300 epochs
# with 20 linear warm-up epochs and cosine decay to 1e-6, then 10 cool-down
# epochs at 1e-6; label smoothing 0.1 and the DeiT/Swin augmentation
# (RandAugment and random erasing from the stock pipeline, Mixup 0.8 and
# CutMix 1.0). Paper (Tab. 2): 79.4 top-1 (GELU PoolFormer-S12: 77.2).
#
# The final checkpoint, work_dirs/poolformer-s12_fles_8xb128_in1k/
# epoch_310.pth, initialises the backbone of
# retinanet_poolformer-s12-fles_fpn_1x_coco.py.
_base_ = 'mmpretrain::poolformer/poolformer-s12_32xb128_in1k.py'
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

# Classification: the indicator is taken over the whole feature map of each
# sample (window_size=None); MLP reduction r=32 (paper E.18).
fles_cls = dict(type='FleS', window_size=None, reduction=32)

# FleS infers its channel count lazily; MaterializedModel runs one no-grad
# dry forward through the backbone so that every FleS parameter exists
# before the optimizer (and DDP) are built. It returns the ImageClassifier
# itself, so checkpoint keys are the plain ImageClassifier keys.
#
# The Runner merges a top-level `data_preprocessor` into the outermost model
# dict, which is MaterializedModel here and takes no such argument; so the
# stock one moves into the ImageClassifier and the top-level key is cleared.
model = dict(
    _delete_=True,
    type='MaterializedModel',
    input_shape=(1, 3, 224, 224),
    submodule='backbone',
    model=dict(
        _base_.model,
        data_preprocessor=_base_.data_preprocessor,
        backbone=dict(
            _base_.model.backbone,
            act_cfg=fles_cls,
            # mmpretrain's default frozen_stages=0 freezes the patch
            # embedding; train everything from scratch.
            frozen_stages=-1),
        head=dict(
            _base_.model.head,
            loss=dict(
                type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
            cal_acc=False),
        train_cfg=dict(augments=[
            dict(type='Mixup', alpha=0.8),
            dict(type='CutMix', alpha=1.0)
        ])))

data_preprocessor = None

train_dataloader = dict(batch_size=128)
val_dataloader = dict(batch_size=128)

# Weight decay. The paper states one value (0.05) and no exception for FleS.
# The stock schedule already exempts norms, biases and all 1-D parameters
# (PoolFormer's layer scales), as the DeiT/Swin recipe does. FleS stores the
# biases of its two MLPs (vertical and horizontal) stacked, as 2-D tensors
# `fc1_bias` (2, C/r) and `fc2_bias` (2, C), which those rules miss; FleS
# declares them (and its indicator coefficients) in `no_decay_params`, and
# ActivationOptimWrapperConstructor gives them no decay like every other
# bias (fc2_bias also holds the identity-safe start value 0.6, which decay
# would pull towards 0). The MLP weights `fc1_weight` / `fc2_weight` are
# decayed like any other linear weight.
optim_wrapper = dict(
    constructor='ActivationOptimWrapperConstructor',
    optimizer=dict(lr=1e-3, weight_decay=0.05),
    clip_grad=dict(max_norm=5.0))

warmup_epochs = 20
main_epochs = 300
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
        eta_min=1e-6,
        by_epoch=True,
        begin=warmup_epochs,
        end=main_epochs,
        convert_to_iter_based=True),
    # cool-down: the cosine schedule ends at eta_min and the LR stays there
]
train_cfg = dict(max_epochs=main_epochs + cooldown_epochs)

default_hooks = dict(checkpoint=dict(interval=10, max_keep_ckpts=3))
# lr 1e-3 is for a total batch of 1024 (8 GPUs x 128).
auto_scale_lr = dict(base_batch_size=1024)
