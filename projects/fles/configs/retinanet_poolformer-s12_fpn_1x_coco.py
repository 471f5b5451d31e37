# GELU baseline of the FleS project: RetinaNet FPN with a stock PoolFormer-S12
# backbone (mmpretrain), 1x schedule on COCO, with the paper's detection
# recipe (FleS paper, App. J): AdamW, lr 2e-3 decaying to 1e-5, weight decay
# 0.05, batch 16 (8 GPUs x 2). Paper (Tab. 25 / Tab. 11): 35.5 mAP.
#
# The backbone starts from the GELU PoolFormer-S12 ImageNet weights that
# mmpretrain ships (converted from the PoolFormer authors' release, 77.2
# top-1, the GELU number in the paper's Tab. 2).
_base_ = 'mmdet::retinanet/retinanet_r50_fpn_1x_coco.py'
custom_imports = dict(
    imports=['mmact', 'mmpretrain.models'], allow_failed_imports=False)

gelu_checkpoint = ('https://download.openmmlab.com/mmclassification/v0/'
                   'poolformer/poolformer-s12_3rdparty_32xb128_in1k_'
                   '20220414-f8d83051.pth')
model = dict(
    backbone=dict(
        _delete_=True,
        type='mmpretrain.PoolFormer',
        arch='s12',
        act_cfg=dict(type='GELU'),
        # outputs of stages 2-4 (network positions 2, 4, 6; the odd
        # positions are the downsampling layers), each through its own
        # GroupNorm. The PoolFormer detection setup also takes stage 1
        # (position 0) and has the FPN skip it (start_level=1), which leaves
        # that output's GroupNorm without gradient and stops DDP; the
        # network is the same without it.
        out_indices=(2, 4, 6),
        # mmpretrain's default frozen_stages=0 freezes the patch embedding;
        # the PoolFormer detection setup fine-tunes the whole backbone
        frozen_stages=-1,
        drop_path_rate=0.0,
        init_cfg=dict(
            type='Pretrained', checkpoint=gelu_checkpoint,
            prefix='backbone.')),
    # three laterals (strides 8-32) and two extra convs on the last input,
    # as RetinaNet's FPN with start_level=1 on four inputs
    neck=dict(in_channels=[128, 320, 512], start_level=0, num_outs=5))

# The paper replaces the 1x schedule's SGD by AdamW (App. J). Norms, biases
# and 1-D parameters (layer scales) get no decay, as in the ImageNet recipe.
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=2e-3, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(
        norm_decay_mult=0.0, bias_decay_mult=0.0, flat_decay_mult=0.0))

# "decays to 1e-5 gradually": 500-iteration linear warm-up (as in the stock
# 1x schedule), then cosine annealing to 1e-5 over the 12 epochs.
max_epochs = 12
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=0,
        end=max_epochs,
        convert_to_iter_based=True)
]
train_cfg = dict(max_epochs=max_epochs)
auto_scale_lr = dict(base_batch_size=16)
