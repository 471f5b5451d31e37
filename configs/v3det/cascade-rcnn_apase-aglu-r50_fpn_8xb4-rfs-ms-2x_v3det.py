# Cascade R-CNN FPN with an APA*+AGLU ResNet-50 backbone on V3Det (recipe of the plain
# R50 config it inherits). Alexandridis et al. 2025, Table IX-c: 35.4 box AP (SE-R50 33.3).
# Backbone from configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    './cascade-rcnn_r50_fpn_8xb4-rfs-ms-2x_v3det.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r50_det, _delete_=True))
