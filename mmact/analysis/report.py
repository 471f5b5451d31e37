"""Tables and figure files shared by the analysis tools."""
import json
import os.path as osp
from typing import Any, List, Sequence

from mmengine.utils import mkdir_or_exist

__all__ = ['format_table', 'save_json', 'save_figure']


def format_table(headers: Sequence[str], rows: List[Sequence[Any]],
                 precision: int = 4) -> str:
    """A plain-text table with aligned columns.

    Args:
        headers (Sequence[str]): Column titles.
        rows (list[Sequence]): Cell values; floats get ``precision``
            significant digits, None prints as ``-``.
        precision (int): Significant digits of floats.
    """

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f'{value:.{precision}g}'
        return '-' if value is None else str(value)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [
        max(len(str(h)), *(len(r[i]) for r in cells)) if cells else len(h)
        for i, h in enumerate(headers)
    ]
    lines = ['  '.join(str(h).ljust(w) for h, w in zip(headers, widths))]
    lines.append('  '.join('-' * w for w in widths))
    lines += ['  '.join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    return '\n'.join(lines)


def save_json(obj: Any, path: str) -> str:
    """Write ``obj`` as indented JSON, creating the folder.

    Args:
        obj: JSON-serialisable data.
        path (str): Output file.
    """
    mkdir_or_exist(osp.dirname(osp.abspath(path)))
    with open(path, 'w') as f:
        json.dump(obj, f, indent=2)
    return path


def save_figure(fig, path: str) -> str:
    """Save a matplotlib figure as PNG, creating the folder, and close it.

    Args:
        fig (matplotlib.figure.Figure): The figure.
        path (str): Output ``.png`` file.
    """
    import matplotlib.pyplot as plt
    mkdir_or_exist(osp.dirname(osp.abspath(path)))
    fig.savefig(path, dpi=120, bbox_inches='tight')
    plt.close(fig)
    return path
