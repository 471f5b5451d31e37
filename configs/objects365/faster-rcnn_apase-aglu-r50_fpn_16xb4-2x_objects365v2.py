# Faster R-CNN FPN with an APA*+AGLU ResNet-50 backbone on Objects365 v2 (2x,
# recipe of the SE-ReLU config it inherits).
# Alexandridis et al. 2025, Table IX-b: 27.5 box AP (SE-R50: 26.4).
# Backbone from configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    './faster-rcnn_se-relu-r50_fpn_16xb4-2x_objects365v2.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r50_det, _delete_=True))
