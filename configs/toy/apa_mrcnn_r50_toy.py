# configs/lvis/apa_mrcnn_r50.py (Mask R-CNN, APA*+AGLU ResNet-50, GOL) on the
# generated LVIS v1-format set, trained from scratch on two CPU processes:
#   tools/dist_train.sh configs/toy/apa_mrcnn_r50_toy.py 2
# Only what the data and the cores force changes (./_base_/lvis_toy.py).
# A pipeline demonstration (`make demo`), not a benchmark.
_base_ = ['../lvis/apa_mrcnn_r50.py', './_base_/lvis_toy.py']

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
