# Faster R-CNN FPN with an SE-ResNet-50 (ReLU) backbone on V3Det (recipe of the plain
# R50 config it inherits). Alexandridis et al. 2025, Table IX-c: 27.0 box AP (25.4 plain R50).
# Backbone from configs/imagenet/se-relu-r50_8xb32-coslr-100e_in1k.py.
_base_ = [
    './faster-rcnn_r50_fpn_8xb4-rfs-ms-2x_v3det.py',
    '../_base_/models/se-relu_resnet.py',
]

model = dict(backbone=dict(_base_.se_relu_r50_det, _delete_=True))
