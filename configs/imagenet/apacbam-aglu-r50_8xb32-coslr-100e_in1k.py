# CBAM-ResNet-50 with APA* gates and AGLU activations on ImageNet-1k
# (Alexandridis et al., Adaptive Parametric Activation, Table VI-a
# "CBAM-ResNet50 w/ APA*+AGLU"): APA in place of both CBAM sigmoids, AGLU at
# every activation position, recipe of the SE-ReLU baseline (Sec. VI-A). As
# the authors' CBAM (classification/cbam.py), the pooled vectors are
# layer-normalised before the shared MLP (use_norm), which ends in dropout 0.1,
# so their CBAM-R50 converts into this config.
# Init as the authors' classification code: APA kappa ~ U(0, 1) in their
# CBAM gates (classification/cbam.py), AGLU kappa ~ U(0.8, 1.2)
# (classification/resnet_pytorch.py), lambda ~ U(0, 1).
# Paper (Table VI-a): 78.9 top-1 (CBAM-R50 78.3).
_base_ = './se-relu-r50_8xb32-coslr-100e_in1k.py'

apa_gate = dict(type='APA', kappa_init=(0.0, 1.0))
model = dict(
    backbone=dict(
        act_cfg=dict(_delete_=True, type='AGLU', kappa_init=(0.8, 1.2)),
        attention_cfg=dict(
            _delete_=True,
            type='APACBAMAttention',
            use_norm=True,
            channel_gate_cfg=apa_gate,
            spatial_gate_cfg=apa_gate)))
