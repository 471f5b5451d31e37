# SE-ResNet-152 (ReLU) on ImageNet-1k, recipe of Alexandridis et al.,
# Adaptive Parametric Activation, Sec. VI-A (see the R50 config).
# Paper (Table VI-a): 80.3 top-1.
_base_ = './se-relu-r50_8xb32-coslr-100e_in1k.py'

model = dict(backbone=dict(depth=152))
