# APA*+AGLU ResNet-101 on ImageNet-1k, recipe of Alexandridis et
# al. 2025, Sec. VI-A.
# Paper (Table VI-a): 80.3 top-1 (SE-R101 79.4).
_base_ = [
    './se-relu-r50_8xb32-coslr-100e_in1k.py',
    '../_base_/models/apase-aglu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_aglu_r101_cls, _delete_=True))
