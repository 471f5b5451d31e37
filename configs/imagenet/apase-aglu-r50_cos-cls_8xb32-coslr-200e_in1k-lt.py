# APA*+AGLU ResNet-50 on ImageNet-LT, recipe of the SE-ReLU baseline
# (Alexandridis et al. 2025, Table XV): APA kappa ~ U(-1, 0),
# AGLU kappa ~ U(1, 1.3), lambda ~ U(0, 1) (the mmact defaults), attention
# dropout 0.1.
# Paper (Table II): 57.9 top-1 (Many 68.3, Medium 54.8, Few 39.4) vs 56.0 for
# SE-R50, both with PC-Softmax (see the baseline config).
_base_ = [
    './se-relu-r50_cos-cls_8xb32-coslr-200e_in1k-lt.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r50_cls, _delete_=True))
