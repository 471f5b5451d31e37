# The box classifier of the APA authors' V3Det detectors (GitHub
# kostas1515/AGLU, mmdetection_v3.2/configs/activations/
# se_{faster,cascade}_rcnn_r50_fpn_8x4_sample1e-3_mstrain_v3det_2x_wc_*.py):
# a wrapped Cauchy angular classifier (Han, ICML 2023) with a fixed scale
# of 300 and softmax cross-entropy (13204 classes + background), in place of
# mmdet's cosine classifier (NormedLinear, temperature 50) with sigmoid CE.
wrapped_cauchy_predictor = dict(
    type='WrappedCauchyLinear', s_trainable=False)
softmax_cross_entropy = dict(
    type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)
