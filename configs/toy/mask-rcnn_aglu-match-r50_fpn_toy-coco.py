# configs/coco/mask-rcnn_aglu-match-r50_fpn_8xb2-2x_coco.py on the generated
# COCO-format set: the toy Mask R-CNN with its ReLUs replaced by AGLUs fitted
# to them. Start it from a ReLU checkpoint with --cfg-options load_from=...
# (the fit then reads that checkpoint's BatchNorms).
_base_ = [
    './mask-rcnn_r50_fpn_toy-coco.py', '../_base_/models/aglu-match_resnet.py'
]

model = dict(
    backbone=dict(
        _base_.aglu_match, _delete_=True, backbone=_base_.model.backbone))
optim_wrapper = dict(constructor='ActivationOptimWrapperConstructor')
