"""Analyses of learned activations (Alexandridis et al. 2025, Sec. III-B,
VII-B, App. F; FleS App. E.1, E.3) used by ``tools/analysis`` and
:class:`mmact.engine.hooks.ActivationStatsHook`."""
from .model_data import (build_split_dataloader, class_groups, forward_logits,
                         load_model, sample_batches, sample_group)
from .probes import (AttentionRecorder, FleSRecorder, activation_curve,
                     activation_parameters, expected_output, find_modules)
from .report import format_table, save_figure, save_json
from .statistics import (attention_channel_variance, attention_entropy,
                         binary_entropy, fit_gumbel, fit_logistic,
                         ks_distance, ks_to_gumbel_and_logistic)

__all__ = [
    'AttentionRecorder', 'FleSRecorder', 'activation_curve',
    'activation_parameters', 'expected_output', 'find_modules',
    'attention_channel_variance', 'attention_entropy', 'binary_entropy',
    'fit_gumbel', 'fit_logistic', 'ks_distance', 'ks_to_gumbel_and_logistic',
    'build_split_dataloader', 'class_groups', 'forward_logits', 'load_model',
    'sample_batches', 'sample_group', 'format_table', 'save_figure',
    'save_json'
]
