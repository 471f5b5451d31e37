# Mask R-CNN FPN with an APA*+AGLU ResNet-101 backbone, 2x schedule on COCO.
# Alexandridis et al. 2025, Table IX-a: 43.6 box AP / 38.9 mask AP (SE-R101: 42.7 / 38.4).
# Backbone from configs/imagenet/apase-aglu-r101_8xb32-coslr-100e_in1k.py.
_base_ = [
    './mask-rcnn_se-relu-r50_fpn_8xb2-2x_coco.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r101_det, _delete_=True))
