# Faster R-CNN FPN with an APA*+AGLU ResNet-50 backbone on V3Det: the
# authors' released model (GitHub kostas1515/AGLU, mmdetection_v3.2/configs/
# activations/se_faster_rcnn_r50_fpn_8x4_sample1e-3_mstrain_v3det_2x_wc_
# unirect.py; recipe and wrapped Cauchy classifier of the SE-ReLU config it
# inherits). Alexandridis et al. 2025, Table IX-c: 29.9 box AP (SE-R50 27.0).
# Backbone from configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    './faster-rcnn_se-relu-r50_fpn_8xb4-rfs-ms-2x_v3det.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r50_det, _delete_=True))
