# Faster R-CNN FPN with an SE-ResNet-50 (ReLU) backbone on V3Det: the
# authors' V3Det baseline (GitHub kostas1515/AGLU, mmdetection_v3.2/configs/
# activations/se_faster_rcnn_r50_fpn_8x4_sample1e-3_mstrain_v3det_2x_wc_
# baseline.py): the recipe of the plain R50 config it inherits with their
# wrapped Cauchy box classifier (../_base_/models/wrapped-cauchy_classifier.py).
# Alexandridis et al. 2025, Table IX-c: 27.0 box AP (25.4 plain R50).
# Backbone from configs/imagenet/se-relu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    './faster-rcnn_r50_fpn_8xb4-rfs-ms-2x_v3det.py',
    '../_base_/models/se-relu_resnet.py',
    '../_base_/models/wrapped-cauchy_classifier.py',
]

model = dict(
    backbone=dict(_base_.se_relu_r50_det, _delete_=True),
    roi_head=dict(
        bbox_head=dict(
            cls_predictor_cfg=dict(_base_.wrapped_cauchy_predictor,
                                   _delete_=True),
            loss_cls=dict(_base_.softmax_cross_entropy, _delete_=True))))
