"""Process helpers for tests that launch the tools (Linux ``/proc``)."""
import socket
from pathlib import Path
from typing import List

__all__ = ['free_port', 'child_processes', 'is_alive']


def free_port() -> str:
    """A TCP port free on this host right now (for a rendezvous)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return str(sock.getsockname()[1])


def child_processes(pid: int) -> List[int]:
    """Live (not zombie) child processes of ``pid``.

    Args:
        pid (int): The parent.
    """
    found = []
    for stat in Path('/proc').glob('[0-9]*/stat'):
        try:
            fields = stat.read_text().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != 'Z':
            found.append(int(stat.parent.name))
    return found


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not).

    Args:
        pid (int): The process.
    """
    try:
        state = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1]
    except OSError:
        return False
    return state.split()[0] != 'Z'
