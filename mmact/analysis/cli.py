"""Command-line pieces shared by ``tools/analysis`` scripts."""
import argparse
import os.path as osp
from typing import Tuple

import torch.nn as nn
from mmengine.config import Config, DictAction
from mmengine.logging import MMLogger

from mmact.checkpoint import add_trust_argument, safe_checkpoint_loading
from mmact.utils.preflight import load_config
from .model_data import load_model

__all__ = ['analysis_parser', 'config_and_model', 'figure_path']


def analysis_parser(description: str,
                    default_out: str,
                    num_samples: int = 64) -> argparse.ArgumentParser:
    """Parser with ``config [checkpoint]`` and the data / output options.

    Args:
        description (str): The tool's one-line description.
        default_out (str): Default ``--out-dir``.
        num_samples (int): Default ``--num-samples``.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('config', help='mmdet or mmpretrain config file')
    parser.add_argument(
        'checkpoint',
        nargs='?',
        help='checkpoint; omitted: the freshly initialised model')
    add_trust_argument(parser)
    parser.add_argument(
        '--out-dir',
        default=default_out,
        help=f'folder for the PNG figures and JSON (default: {default_out})')
    parser.add_argument(
        '--split',
        choices=['train', 'val', 'test'],
        default='val',
        help="dataloader of the config to sample (default: 'val')")
    parser.add_argument(
        '--num-samples',
        type=int,
        default=num_samples,
        help=f'samples to run through the model (default: {num_samples})')
    parser.add_argument(
        '--batch-size', type=int, help="override the split's batch size")
    parser.add_argument('--device', default='cpu', help='e.g. cpu, cuda:0')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings, key=value pairs merged into the config')
    return parser


def config_and_model(args: argparse.Namespace) -> Tuple[Config, nn.Module]:
    """Load ``args.config`` and build its model from ``args.checkpoint``."""
    if args.num_samples < 1:
        raise ValueError(f'--num-samples must be >= 1, got {args.num_samples}')
    cfg = load_config(args.config, args.cfg_options)
    # init_weights logs every parameter at INFO; keep the tool's output to
    # its tables
    MMLogger.get_instance('mmact_analysis', log_level='WARNING')
    # the checkpoint, and any init_cfg Pretrained weights the model loads
    with safe_checkpoint_loading(args.trust_checkpoint):
        model = load_model(cfg, args.checkpoint, args.device)
    return cfg, model


def figure_path(args: argparse.Namespace, name: str) -> str:
    """``<out-dir>/<name>``."""
    return osp.join(args.out_dir, name)
