# ResNet-50 with AGLU activations and no channel attention on ImageNet-1k,
# same recipe as the SE-ReLU baseline (Alexandridis et al., Adaptive
# Parametric Activation, Sec. VI-A). AGLU kappa ~ U(1, 1.3), lambda ~ U(0, 1).
# Paper (Table VI-a): 77.5 top-1 (plain ResNet-50: 76.9).
# Its checkpoint initialises detectors through
# configs/_base_/models/aglu_resnet.py (aglu_r50_det).
_base_ = [
    './se-relu-r50_8xb32-coslr-100e_in1k.py',
    '../_base_/models/aglu_resnet.py',
]

model = dict(backbone=dict(_base_.aglu_r50_cls, _delete_=True))
