# SE-ResNet-101 (ReLU) on ImageNet-1k, recipe of Alexandridis et
# al. 2025, Sec. VI-A.
# Paper (Table VI-a): 79.4 top-1.
_base_ = './se-relu-r50_8xb32-coslr-100e_in1k.py'

model = dict(backbone=dict(_base_.se_relu_r101_cls, _delete_=True))
