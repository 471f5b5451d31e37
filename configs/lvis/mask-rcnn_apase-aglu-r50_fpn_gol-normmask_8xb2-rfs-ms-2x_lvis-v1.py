# Mask R-CNN FPN on LVIS v1 with an APA*+AGLU ResNet-50 backbone, GOL,
# normalised mask, RFS, multi-scale 2x (see the SE-ReLU config it inherits).
# Alexandridis et al. 2025, Table V: 29.1 mask AP / 29.0 box AP (SE-R50: 28.2 / 28.1).
# Backbone from configs/imagenet/apase-aglu-r50_8xb32-coslr-100e_in1k.py.
# Short name: configs/lvis/apa_mrcnn_r50.py.
_base_ = [
    './mask-rcnn_se-relu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r50_det, _delete_=True))
