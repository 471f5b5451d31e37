"""What the calibration and neural-collapse analyses read from a classifier:
its predicted class probabilities and its penultimate features."""
import numpy as np
import torch
import torch.nn as nn

__all__ = ['check_classifier', 'predicted_scores', 'penultimate_features']


def check_classifier(model: nn.Module, analysis: str) -> None:
    """Raise a ValueError unless ``model`` is an mmpretrain classifier.

    Args:
        model (nn.Module): The built model.
        analysis (str): Name of the analysis, for the message.
    """
    try:
        from mmpretrain.models.classifiers import ImageClassifier
    except ImportError as error:  # pragma: no cover - mmpretrain is optional
        raise ImportError(f'{analysis} needs mmpretrain') from error
    if not isinstance(model, ImageClassifier):
        raise ValueError(
            f'{analysis} needs an mmpretrain ImageClassifier (one label and '
            f'one probability vector per image), got {type(model).__name__}')


@torch.no_grad()
def predicted_scores(model: nn.Module, data: dict) -> np.ndarray:
    """The class probabilities the classifier predicts for one batch.

    They are the head's ``pred_score``: softmax of its logits, after any
    correction its ``predict`` applies (e.g. the PC-Softmax prior
    compensation of :class:`mmact.models.heads.PCSoftmaxArcFaceClsHead`).

    Args:
        model (nn.Module): An mmpretrain classifier in eval mode.
        data (dict): A preprocessed batch (``inputs``, ``data_samples``).

    Returns:
        np.ndarray: ``(N, C)`` float64 probabilities.
    """
    samples = model(**data, mode='predict')
    return torch.stack([s.pred_score for s in samples]).double().cpu().numpy()


@torch.no_grad()
def penultimate_features(model: nn.Module, data: dict) -> np.ndarray:
    """Features that enter the classifier layer (mmpretrain's
    ``extract_feat(stage='pre_logits')``: backbone, neck, head pre-logits).

    Args:
        model (nn.Module): An mmpretrain classifier in eval mode.
        data (dict): A preprocessed batch.

    Returns:
        np.ndarray: ``(N, d)`` float64 features.
    """
    features = model.extract_feat(data['inputs'], stage='pre_logits')
    if isinstance(features, (list, tuple)):
        features = features[-1]
    return features.reshape(features.shape[0], -1).double().cpu().numpy()
