"""Hand the training set's class frequencies to frequency-aware losses.

:class:`GOLFrequencyHook` is how :class:`mmact.models.losses.GOLLoss` gets its
per-class image frequencies in a normal mmdet run: before training it reads
them from ``runner.train_dataloader.dataset`` (through RFS / repeat / concat
wrappers; LVIS ``image_count`` when the annotation file has it, else images
counted per label) and sets them on every loss of the model that has a
``set_class_image_counts`` method. Registered in ``mmdet.registry.HOOKS``.
"""
from typing import List

import torch.nn as nn
from mmdet.registry import HOOKS
from mmengine.hooks import Hook

from mmact.datasets.class_counts import image_counts_from_dataset

__all__ = ['GOLFrequencyHook']


@HOOKS.register_module()
class GOLFrequencyHook(Hook):
    """Set per-class image frequencies from the training dataset.

    Usage: ``custom_hooks = [dict(type='GOLFrequencyHook')]``.

    Args:
        source (str): ``'auto'`` (LVIS ``image_count`` when present, else
            counted), ``'image_count'`` (require it) or ``'count'`` (always
            count the loaded annotations).
        overwrite (bool): Also replace frequencies a loss got from its own
            config (``class_image_counts`` / ``freq_file``). Default False:
            an explicit config wins.
    """

    priority = 'VERY_HIGH'

    def __init__(self, source: str = 'auto', overwrite: bool = False) -> None:
        if source not in ('auto', 'image_count', 'count'):
            raise ValueError(f"source must be 'auto', 'image_count' or "
                             f"'count', got {source!r}")
        self.source = source
        self.overwrite = overwrite

    @staticmethod
    def frequency_losses(model: nn.Module) -> List[nn.Module]:
        """Modules of ``model`` that take class frequencies.

        Args:
            model (nn.Module): The (possibly wrapped) model.

        Returns:
            list[nn.Module]: Modules with ``set_class_image_counts``, each
            once (a DDP wrapper also yields the inner modules).
        """
        found: List[nn.Module] = []
        for module in model.modules():
            if callable(getattr(module, 'set_class_image_counts', None)) \
                    and all(module is not m for m in found):
                found.append(module)
        return found

    def before_train(self, runner) -> None:
        """Read the frequencies once and set them on every loss.

        Args:
            runner: The mmengine runner.
        """
        targets = [
            m for m in self.frequency_losses(runner.model)
            if self.overwrite or not getattr(m, 'has_frequency_source', False)
        ]
        if not targets:
            runner.logger.info('GOLFrequencyHook: no loss needs class '
                               'frequencies')
            return
        counts, num_images = image_counts_from_dataset(
            runner.train_dataloader.dataset, source=self.source)
        for loss in targets:
            loss.set_class_image_counts(counts, num_images)
        rare = targets[0].rare_classes() if hasattr(targets[0],
                                                    'rare_classes') else None
        runner.logger.info(
            f'GOLFrequencyHook: {len(counts)} classes over {num_images} '
            f'annotated training images set on {len(targets)} loss(es)' +
            (f'; {int(rare.sum())} rare' if rare is not None else ''))
