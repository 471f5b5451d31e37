# tiny-cls_aglu-apa.py trained by iterations: 6 iterations (2 passes over
# the data), a checkpoint and a validation every 3.
_base_ = ['./tiny-cls_aglu-apa.py']

train_cfg = dict(
    _delete_=True, type='IterBasedTrainLoop', max_iters=6, val_interval=3)
param_scheduler = dict(
    type='CosineAnnealingLR', T_max=6, by_epoch=False, begin=0, end=6)
default_hooks = dict(
    checkpoint=dict(by_epoch=False, interval=3, max_keep_ckpts=-1))
log_processor = dict(by_epoch=False)
