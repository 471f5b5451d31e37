# Mask R-CNN FPN on LVIS v1 with an APA*+AGLU ResNet-101 backbone, GOL,
# normalised mask (fixed scale 20, deconv: the authors' R101 model, see the
# SE-ReLU R101 config it inherits), RFS, multi-scale 2x.
# Alexandridis et al. 2025, Table V: 30.7 mask AP / 31.1 box AP (SE-R101: 29.7 / 30.0).
# Backbone from configs/imagenet/apase-aglu-r101_8xb32-coslr-100e_in1k.py.
_base_ = [
    './mask-rcnn_se-relu-r101_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r101_det, _delete_=True))
