# Mask R-CNN FPN on LVIS v1 with an SE-ResNet-101 (ReLU) backbone, GOL,
# normalised mask, RFS, multi-scale 2x.
# Alexandridis et al. 2025, Table V: 29.7 mask AP / 30.0 box AP.
# Backbone from configs/imagenet/se-relu-r101_8xb32-coslr-100e_in1k.py.
# The R50 recipe it inherits, except the mask head: the authors' released
# R101 model (GitHub kostas1515/AGLU, mmdetection_v3.2/configs/activations/
# mask_rcnn_r101_fpn_8x2_sample1e-3_mstrain_lvis_2x.py) upsamples with
# mmdet's deconv and scales the cosine logits by a fixed 20 (mmdet's
# NormedConv2d), where their R50 uses CARAFE and a learned scale.
_base_ = './mask-rcnn_se-relu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py'

model = dict(
    backbone=dict(_base_.se_relu_r101_det, _delete_=True),
    roi_head=dict(
        mask_head=dict(
            type='FCNMaskHead',
            upsample_cfg=dict(_delete_=True, type='deconv', scale_factor=2),
            predictor_cfg=dict(
                _delete_=True, type='NormedConv2d', tempearture=20))))
