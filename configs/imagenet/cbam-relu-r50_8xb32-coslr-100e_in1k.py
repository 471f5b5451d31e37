# CBAM-ResNet-50 (ReLU; CBAM channel + spatial attention, Woo et al.) on
# ImageNet-1k, recipe of the SE-ReLU baseline (Alexandridis et al., Adaptive
# Parametric Activation, Sec. VI-A). The channel MLP ends in Dropout(0.1) as
# in the APA authors' CBAM code (CBAM itself has none).
# Paper (Table VI-a): 78.3 top-1.
_base_ = './se-relu-r50_8xb32-coslr-100e_in1k.py'

model = dict(
    backbone=dict(
        attention_cfg=dict(_delete_=True, type='CBAMAttention', dropout=0.1)))
