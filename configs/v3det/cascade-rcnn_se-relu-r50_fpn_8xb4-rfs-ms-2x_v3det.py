# Cascade R-CNN FPN with an SE-ResNet-50 (ReLU) backbone on V3Det: the
# authors' V3Det baseline (GitHub kostas1515/AGLU, mmdetection_v3.2/configs/
# activations/se_cascade_rcnn_r50_fpn_8x4_sample1e-3_mstrain_v3det_2x_wc_
# baseline.py): the recipe of the plain R50 config it inherits with their
# wrapped Cauchy box classifier in all three stages.
# Alexandridis et al. 2025, Table IX-c: 33.3 box AP (31.6 plain R50).
# Backbone from configs/imagenet/se-relu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    './cascade-rcnn_r50_fpn_8xb4-rfs-ms-2x_v3det.py',
    '../_base_/models/se-relu_resnet.py',
    '../_base_/models/wrapped-cauchy_classifier.py',
]

model = dict(
    backbone=dict(_base_.se_relu_r50_det, _delete_=True),
    roi_head=dict(bbox_head=[
        dict(
            stage,
            cls_predictor_cfg=_base_.wrapped_cauchy_predictor,
            loss_cls=_base_.softmax_cross_entropy)
        for stage in _base_.model.roi_head.bbox_head
    ]))
