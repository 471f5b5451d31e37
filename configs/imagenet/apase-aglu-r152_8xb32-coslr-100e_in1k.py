# APA*+AGLU ResNet-152 on ImageNet-1k, recipe and init of the R50 config
# (Alexandridis et al., Adaptive Parametric Activation, Sec. VI-A).
# Paper (Table VI-a): 80.8 top-1 (SE-R152 80.3).
_base_ = './apase-aglu-r50_8xb32-coslr-100e_in1k.py'

model = dict(backbone=dict(depth=152))
