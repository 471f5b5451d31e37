# configs/lvis/mask-rcnn_aglu-match-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py
# in small: the toy LVIS Mask R-CNN with its ReLUs replaced by AGLUs fitted to
# them (see mask-rcnn_aglu-match-r50_fpn_toy-coco.py).
_base_ = './mask-rcnn_r50_fpn_toy-lvis.py'

model = dict(
    backbone=dict(
        _delete_=True,
        type='ActSwapBackbone',
        act_cfg=dict(type='AGLU'),
        untie=True,
        match=True,
        backbone=_base_.model.backbone))
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
