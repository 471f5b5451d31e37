# The LVIS v1 recipe of mask-rcnn_r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1
# (GOL, normalised mask, RFS, multi-scale 2x) from mmdet's own ReLU ImageNet
# checkpoint (torchvision://resnet50), every ReLU of the backbone replaced by
# an AGLU fitted to it (function-preserving swap, docs/design/swap.md).
# See configs/coco/mask-rcnn_aglu-match-r50_fpn_8xb2-2x_coco.py for
# SE-ResNet checkpoints. No paper result.
_base_ = [
    './mask-rcnn_r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py',
    '../_base_/models/aglu-match_resnet.py'
]

model = dict(
    backbone=dict(
        _base_.aglu_match, _delete_=True, backbone=_base_.model.backbone))
