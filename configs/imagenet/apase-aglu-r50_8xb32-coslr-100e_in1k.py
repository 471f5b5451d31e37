# APA*+AGLU ResNet-50 on ImageNet-1k, same recipe as the SE-ReLU baseline
# (Alexandridis et al. 2025, Sec. VI-A). Init as the authors' classification
# code (../_base_/models/apase-aglu_resnet.py): APA kappa ~ U(-1, 0), AGLU
# kappa ~ U(0.8, 1.2), lambda ~ U(0, 1).
# Paper (Table VI-a): 78.7 top-1 (SE-R50 77.5).
_base_ = [
    './se-relu-r50_8xb32-coslr-100e_in1k.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r50_cls, _delete_=True))
