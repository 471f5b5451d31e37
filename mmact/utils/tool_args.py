"""What ``tools/train.py`` and ``tools/test.py`` share on the command line:
the config and its overrides, the work dir, the launcher, and the
checkpoint opt-out (mmdet's tools spell them the same way)."""
import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction

from ..checkpoint import add_trust_argument
from .preflight import load_config

__all__ = ['add_runner_arguments', 'parse_runner_args', 'runner_config']


def add_runner_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--work-dir``, ``--trust-checkpoint``, ``--cfg-options``,
    ``--launcher`` and ``--local-rank``.

    Args:
        parser (argparse.ArgumentParser): The tool's parser, with its
            positional arguments already added.
    """
    parser.add_argument(
        '--work-dir',
        help='the dir to save logs and results (default: work_dirs/<config '
        'name>, or the config\'s work_dir)')
    add_trust_argument(parser)
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings, key=value pairs merged into the config')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)


def parse_runner_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parse, and give ``--local-rank`` to mmengine as torch.distributed's
    launcher does (``LOCAL_RANK``).

    Args:
        parser (argparse.ArgumentParser): A parser with
            :func:`add_runner_arguments`.
    """
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def runner_config(args: argparse.Namespace) -> Config:
    """``args.config`` with ``--cfg-options``, the launcher and the work dir
    (``--work-dir``, else the config's, else ``work_dirs/<config name>``).

    Args:
        args (argparse.Namespace): Parsed by :func:`parse_runner_args`.
    """
    cfg = load_config(args.config, args.cfg_options)
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    return cfg
