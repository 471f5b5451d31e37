# Swin-T with FleS in every FFN (replacing GELU), ImageNet-1k from scratch
# with the FleS paper's Transformer recipe (App. G item 1; the stock Swin
# recipe otherwise): AdamW, lr 1e-3 at batch 1024 (16 GPUs x 64), weight
# decay 0.05, 300 epochs with 20 linear warm-up epochs and cosine decay to
# 1e-6, then 10 cool-down epochs at 1e-6, label smoothing 0.1, Mixup 0.8 /
# CutMix 1.0, RandAugment, random erasing. Paper (Tab. 3 / 9): 82.3 top-1
# (GELU: 81.3), 31.7M parameters; this model has 31.6M (see README).
#
# The final checkpoint, work_dirs/swin-tiny_fles_16xb64_in1k/epoch_310.pth,
# initialises the backbone of mask-rcnn_swin-t-fles_fpn_1x_coco.py.
_base_ = 'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py'
custom_imports = dict(imports=['mmact'], allow_failed_imports=False)

# Classification: the indicator is taken over all tokens of each sample
# (window_size=None); shared-trunk MLP with r = 32.
fles_cls = dict(type='FleS', window_size=None, reduction=32)

# FleSSwinTransformer is mmpretrain's SwinTransformer (same keys) whose
# blocks give FleS their token grid; it matters for the windowed detector.
# MaterializedModel materialises the lazy FleS layers with one dry run
# (checkpoint keys unchanged); the top-level data_preprocessor moves into
# the classifier, since the Runner would hand it to MaterializedModel.
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
            type='FleSSwinTransformer',
            act_cfg=fles_cls,
            # Swin's classification behaviour: no shift on the 7x7 last
            # stage (stated so that small-image tests can switch it)
            pad_small_map=False)))
data_preprocessor = None

# FleS declares its biases in no_decay_params; the constructor exempts them
# on top of the stock norm / bias / 1-D / position-table rules.
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')

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
