# No weight decay on learnable activation parameters (paper 000, Sec. V-B
# and App. "Implementation details": kappa and lambda train without decay).
# The keys are those `mmact.utils.activation_paramwise_cfg()` returns; mmengine
# matches a custom key as a substring of '<module path>.<param name>', so they
# cover every APA / AGLU, including the gates of APA* attention.
# Use as: optim_wrapper = dict(paramwise_cfg=_base_.act_paramwise_cfg)
act_paramwise_cfg = dict(
    custom_keys={
        '.kappa_param': dict(decay_mult=0.0),
        '.lambda_param': dict(decay_mult=0.0),
    })
