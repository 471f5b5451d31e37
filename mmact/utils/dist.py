"""Distributed set-up for machines without a GPU, and workers that end with
their launcher."""
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp
from mmengine.config import Config


def setup_cpu_distributed(cfg: Config, launcher: str) -> bool:
    """Prepare ``cfg`` for distributed training when CUDA is absent.

    mmengine's ``init_dist`` calls ``torch.cuda.set_device`` and its Runner
    wraps the model with ``device_ids=[LOCAL_RANK]``; both fail without a GPU.
    On such a machine this initialises the process group with gloo itself
    (the Runner then skips its own initialisation) and selects
    :class:`CPUDistributedDataParallel`. With CUDA available nothing changes.
    Under slurm (``srun``, one task per process) the rank, world size and
    rendezvous come from slurm's variables as in mmengine's ``init_dist``.

    Args:
        cfg (Config): The config the Runner will be built from (updated in
            place).
        launcher (str): ``'none'``, ``'pytorch'``, ``'slurm'`` or ``'mpi'``.

    Returns:
        bool: Whether the CPU path was taken.
    """
    if launcher == 'none' or torch.cuda.is_available():
        return False
    if launcher == 'slurm':
        slurm_environment(_dist_cfg_port(cfg))
    elif launcher != 'pytorch':
        raise RuntimeError(
            f'launcher={launcher!r} on a machine without a GPU is not '
            "supported; use launcher='pytorch' (tools/dist_train.sh, torchrun) "
            "or 'slurm' (tools/slurm_train.sh).")
    dist_cfg = cfg.setdefault('env_cfg', {}).setdefault('dist_cfg', {})
    dist_cfg['backend'] = 'gloo'
    if not torch_dist.is_initialized():
        _init_process_group('gloo', dist_cfg.get('timeout', 1800))
    wrapper = cfg.get('model_wrapper_cfg') or {}
    if wrapper.get(
            'type',
            'MMDistributedDataParallel') not in ('MMDistributedDataParallel',
                                                 'CPUDistributedDataParallel'):
        raise RuntimeError(
            f'model_wrapper_cfg type {wrapper["type"]!r} needs a GPU; only '
            'MMDistributedDataParallel is replaced for CPU training.')
    cfg.model_wrapper_cfg = dict(wrapper, type='CPUDistributedDataParallel')
    return True


def _init_process_group(backend: str, timeout_s: float) -> None:
    """``init_process_group`` from torchrun's variables, in a store space of
    its own for each attempt of a restarted job.

    torchrun (static rendezvous) keeps its store across restarts: workers of
    a later attempt read the addresses the killed attempt's ranks published
    and fail to connect ("Gloo connectFullMesh failed ... Connection
    refused", or hang), in 2 of 6 restarts here.
    """
    timeout = timedelta(seconds=timeout_s)
    rank, world_size = int(os.environ['RANK']), int(os.environ['WORLD_SIZE'])
    attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')
    if attempt.isdigit() and int(attempt) > 0 and \
            os.environ.get('TORCHELASTIC_USE_AGENT_STORE') == 'True':
        store = torch_dist.TCPStore(
            os.environ['MASTER_ADDR'],
            int(os.environ['MASTER_PORT']),
            world_size,
            is_master=False,
            timeout=timeout)
        torch_dist.init_process_group(
            backend,
            store=torch_dist.PrefixStore(f'mmact/attempt_{attempt}', store),
            rank=rank,
            world_size=world_size,
            timeout=timeout)
        return
    torch_dist.init_process_group(
        backend, rank=rank, world_size=world_size, timeout=timeout)


def init_restarted_process_group(cfg: Config, launcher: str) -> bool:
    """Initialise the process group of a worker torchrun restarted, before
    mmengine's Runner would (it reuses an initialised group), in a store
    space of its own (:func:`_init_process_group`).

    Args:
        cfg (Config): The run's config (``env_cfg.dist_cfg``: backend,
            timeout).
        launcher (str): The tool's ``--launcher``.

    Returns:
        bool: Whether it initialised the group.
    """
    attempt = os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')
    if launcher != 'pytorch' or not attempt.isdigit() or int(attempt) == 0 \
            or torch_dist.is_initialized():
        return False
    dist_cfg = (cfg.get('env_cfg') or {}).get('dist_cfg', {})
    if mp.get_start_method(allow_none=True) is None:
        mp.set_start_method('spawn')  # as mmengine's init_dist
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get('LOCAL_RANK', 0)))
    _init_process_group(
        dist_cfg.get('backend',
                     'nccl' if torch.cuda.is_available() else 'gloo'),
        dist_cfg.get('timeout', 1800))
    return True


def _dist_cfg_port(cfg: Config) -> Optional[int]:
    """``env_cfg.dist_cfg.port``, mmengine's slurm rendezvous port."""
    return (cfg.get('env_cfg') or {}).get('dist_cfg', {}).get('port')


def slurm_environment(port: Optional[int]) -> None:
    """torch.distributed's variables from slurm's (mmengine's rules).

    Args:
        port (int, optional): ``MASTER_PORT``; None keeps the environment's.
    """
    nodes = os.environ['SLURM_NODELIST']
    os.environ.setdefault(
        'MASTER_ADDR',
        subprocess.getoutput(f'scontrol show hostname {nodes} | head -n1'))
    if port is not None:
        os.environ['MASTER_PORT'] = str(port)
    os.environ.setdefault('MASTER_PORT', '29500')
    os.environ['WORLD_SIZE'] = os.environ['SLURM_NTASKS']
    os.environ['RANK'] = os.environ['SLURM_PROCID']
    os.environ['LOCAL_RANK'] = os.environ.get('SLURM_LOCALID', '0')


#: Seconds between two looks at whether the launcher is still the parent.
LAUNCHER_POLL_S = 0.5
#: Seconds an orphaned worker has to stop after SIGTERM (torchrun's own
#: grace period): then SIGKILL, since a main thread blocked in a collective
#: with a rank that is gone never runs Python's signal handler.
ORPHAN_GRACE_S = 30.0


def _kill_after_grace() -> None:
    time.sleep(ORPHAN_GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)


def _end_when_orphaned(parent: int) -> None:
    """SIGTERM to this process once its parent is not ``parent`` any more
    (the parent ended and the process was re-parented), SIGKILL
    :data:`ORPHAN_GRACE_S` later if it still runs."""
    while os.getppid() == parent:
        time.sleep(LAUNCHER_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)
    _kill_after_grace()


def end_with_launcher(launcher: str) -> bool:
    """Have this worker receive SIGTERM when the process that started it
    ends (Linux), so that workers do not train on after their launcher was
    killed, even with ``kill -9``.

    torchrun stops its workers when it is asked to (SIGTERM, SIGINT), but
    not when it is killed outright; ``tools/dist_train.sh`` and
    ``dist_test.sh`` ``exec`` torchrun, so killing the script kills
    torchrun, and this ends its workers: a daemon thread looks at the
    parent process every :data:`LAUNCHER_POLL_S` seconds and signals the
    worker once it changed (SIGTERM: a training stops at the next iteration
    after a checkpoint; SIGKILL :data:`ORPHAN_GRACE_S` later). A worker that gets here after its launcher
    (``MMACT_LAUNCHER_PID``, set by the scripts) already ended ends at
    once.

    Args:
        launcher (str): The tool's ``--launcher``; only ``'pytorch'``
            (torchrun) workers are set up.

    Returns:
        bool: Whether the worker watches its launcher.
    """
    if launcher != 'pytorch' or not sys.platform.startswith('linux'):
        return False
    parent = os.getppid()
    # A launcher that died before this call: the scripts name their pid
    # (which torchrun keeps), so compare.
    launcher_pid = os.environ.get('MMACT_LAUNCHER_PID')
    if launcher_pid and parent != int(launcher_pid):
        threading.Thread(
            target=_kill_after_grace, name='mmact-orphan-kill',
            daemon=True).start()
        os.kill(os.getpid(), signal.SIGTERM)
        return True
    threading.Thread(
        target=_end_when_orphaned,
        args=(parent, ),
        name='mmact-launcher-watch',
        daemon=True).start()
    return True


def release_distributed() -> None:
    """Destroy the default process group (and every other) if one exists."""
    if torch_dist.is_available() and torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def finish_run(cpu_distributed: bool, status: int = 0) -> None:
    """End a tool's run.

    Releases the process groups. A CPU-distributed worker (the gloo set-up
    of :func:`setup_cpu_distributed`) then leaves with ``os._exit(status)``
    after flushing logging and the standard streams: at interpreter
    teardown, threads that torch.distributed's C++ objects own could be
    destroyed while still joinable, which aborted a rank after a successful
    run ("terminate called without an active exception", in two of three
    full test-suite runs, not in 11 runs in isolation). Nothing is pending
    by then: the Runner has written and closed checkpoints and logs, and its
    LoggerHook closed the visualizer. Other processes return, or exit with
    ``status`` where it is not 0.

    Args:
        cpu_distributed (bool): What :func:`setup_cpu_distributed` returned.
        status (int): The exit status (0: the run finished).
    """
    release_distributed()
    if not cpu_distributed:
        if status:
            sys.exit(status)
        return
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def is_launcher_main(launcher: str) -> bool:
    """Whether this is the job's rank 0, before the process group exists
    (the variables torchrun, slurm and Open MPI set).

    Args:
        launcher (str): ``'none'``, ``'pytorch'``, ``'slurm'`` or ``'mpi'``.
    """
    if launcher == 'none':
        return True
    for name in ('RANK', 'SLURM_PROCID', 'OMPI_COMM_WORLD_RANK'):
        if name in os.environ:
            return int(os.environ[name]) == 0
    return True
