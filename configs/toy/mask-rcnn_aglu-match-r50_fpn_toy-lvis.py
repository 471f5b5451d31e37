# configs/lvis/mask-rcnn_aglu-match-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py
# in small: the toy LVIS Mask R-CNN with its ReLUs replaced by AGLUs fitted to
# them (see mask-rcnn_aglu-match-r50_fpn_toy-coco.py).
_base_ = [
    './mask-rcnn_r50_fpn_toy-lvis.py', '../_base_/models/aglu-match_resnet.py'
]

model = dict(
    backbone=dict(
        _base_.aglu_match, _delete_=True, backbone=_base_.model.backbone))
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
