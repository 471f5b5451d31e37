# RetinaNet FPN with a FleS PoolFormer-S12 backbone, 1x schedule on COCO
# (FleS paper, App. J and E.8). Every token-MLP activation of PoolFormer is
# FleS with a windowed indicator: 9x15 windows (tiles) on each stage's
# feature map. Paper (Tab. 25 / Tab. 11): 36.2 mAP (GELU: 35.5).
#
# Same recipe as the GELU baseline this config inherits (which inherits
# mmdet::retinanet/retinanet_r50_fpn_1x_coco.py); the backbone starts from
# the FleS ImageNet checkpoint written by
#   tools/dist_train.sh projects/fles/configs/poolformer-s12_fles_8xb128_in1k.py 8
_base_ = './retinanet_poolformer-s12_fpn_1x_coco.py'

fles_checkpoint = 'work_dirs/poolformer-s12_fles_8xb128_in1k/epoch_310.pth'
# Window (h, w) in feature-map pixels of every stage; a window larger than a
# (deep-stage) map is clamped to the map. Paper ablation (Tab. 11): 9x9 gives
# 36.1, 5x5 35.8 mAP. The paper's wording ("feature patch of size 9x15", 5x5
# a "smaller" window than 9x9) reads as pixels; window_grid=(9, 15) instead
# tiles every map into 9x15 windows (see the project README).
fles_det = dict(type='FleS', window_size=(9, 15), reduction=32)

# MaterializedModel materialises the lazy FleS parameters with one no-grad
# dry run through the backbone (before the optimizer is built) and returns
# the RetinaNet itself: checkpoint keys are the plain RetinaNet keys, and
# FleS parameters in the ImageNet checkpoint load by shape. A dry-run input
# of 288x480 keeps every stage at least as large as one 9x15 window.
model = dict(
    _delete_=True,
    type='MaterializedModel',
    input_shape=(1, 3, 288, 480),
    submodule='backbone',
    model=dict(
        _base_.model,
        backbone=dict(
            _base_.model.backbone,
            act_cfg=fles_det,
            init_cfg=dict(
                type='Pretrained',
                checkpoint=fles_checkpoint,
                prefix='backbone.'))))

# FleS MLP biases are stored stacked as 2-D tensors, which bias_decay_mult /
# flat_decay_mult do not catch: the constructor exempts what FleS declares in
# `no_decay_params` (same policy as the ImageNet config; the MLP weights are
# decayed like other linear weights).
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
