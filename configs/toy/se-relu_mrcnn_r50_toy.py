# The SE-ReLU baseline of configs/lvis/ (Mask R-CNN, SE-ResNet-50 with ReLU,
# GOL) on the generated LVIS v1-format set, trained from scratch on two CPU
# processes, beside configs/toy/apa_mrcnn_r50_toy.py:
#   tools/dist_train.sh configs/toy/se-relu_mrcnn_r50_toy.py 2
# Only what the data and the cores force changes (./_base_/lvis_toy.py).
# A pipeline demonstration (`make demo`), not a benchmark.
_base_ = [
    '../lvis/mask-rcnn_se-relu-r50_fpn_gol-normmask_8xb2-rfs-ms-2x_lvis-v1.py',
    './_base_/lvis_toy.py'
]

model = _base_.toy_model
train_dataloader = _base_.toy_train_dataloader
val_dataloader = _base_.toy_test_dataloader
test_dataloader = _base_.toy_test_dataloader
val_evaluator = _base_.toy_evaluator
test_evaluator = _base_.toy_evaluator
train_cfg = _base_.toy_train_cfg
param_scheduler = _base_.toy_param_scheduler
optim_wrapper = _base_.toy_optim_wrapper
default_hooks = _base_.toy_default_hooks
randomness = dict(seed=0)
