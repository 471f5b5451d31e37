# APA*-ResNet-50 (APA* channel attention, ReLU activations) on ImageNet-1k,
# same recipe as the SE-ReLU baseline (Alexandridis et al., Adaptive
# Parametric Activation, Sec. VI-A); APA kappa ~ U(-1, 0), lambda ~ U(0, 1)
# as the authors' classification code (their SE gate, Unified, in
# classification/resnet_pytorch.py).
# Paper: no ImageNet-1k number for APA* without AGLU (Table VI-a lists
# SE-R50 77.5 and APA*+AGLU R50 78.7).
# Its checkpoint initialises detectors through
# configs/_base_/models/apase-relu_resnet.py (apase_relu_r50_det).
_base_ = [
    './se-relu-r50_8xb32-coslr-100e_in1k.py',
    '../_base_/models/apase-relu_resnet.py',
]

model = dict(backbone=dict(_base_.apase_relu_r50_cls, _delete_=True))
