"""Print the test metrics of several runs side by side and save them as json.

Each run is ``NAME=WORK_DIR``, the folder ``tools/test.py`` (or
``tools/dist_test.sh``) wrote into with ``--work-dir``; its newest test
metrics (``WORK_DIR/<timestamp>/<timestamp>.json``) are read. ``make demo``
uses it for the APA* and SE-ReLU toy LVIS runs::

    python tools/analysis/compare_runs.py \\
        'APA*+AGLU R50=work_dirs/demo/apa_mrcnn_r50_toy' \\
        'SE-ReLU R50=work_dirs/demo/se-relu_mrcnn_r50_toy' \\
        --out work_dirs/demo/summary.json

A run without test metrics, or whose newest checkpoint is newer than its
newest test metrics (a test that did not finish), is an error: the table is
never printed from stale or partial results.
"""
import argparse
import glob
import json
import math
import os
import os.path as osp
from typing import Dict, List, Optional, Sequence, Tuple

# LVISMetric's keys are '<prefix>/<iou type>_<name>', e.g. 'lvis/bbox_APr'.
DEFAULT_IOU_TYPES = ('bbox', 'segm')
DEFAULT_METRICS = ('AP', 'AP50', 'APr', 'APc', 'APf')


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parse command line arguments.

    Args:
        argv (list[str], optional): Arguments; ``sys.argv[1:]`` when None.

    Returns:
        argparse.Namespace: Parsed arguments.
    """
    parser = argparse.ArgumentParser(
        description='Compare the test metrics of several runs.')
    parser.add_argument(
        'runs', nargs='+', metavar='NAME=WORK_DIR', help='runs to compare')
    parser.add_argument(
        '--iou-types',
        nargs='+',
        default=list(DEFAULT_IOU_TYPES),
        help='metric groups (default: bbox segm)')
    parser.add_argument(
        '--metrics',
        nargs='+',
        default=list(DEFAULT_METRICS),
        help='metric names per group (default: AP AP50 APr APc APf, the '
        'LVISMetric names)')
    parser.add_argument('--out', help='write the table and values here')
    args = parser.parse_args(argv)
    for run in args.runs:
        if '=' not in run or not run.split('=', 1)[0]:
            parser.error(f'a run is NAME=WORK_DIR, got {run!r}')
    return args


def _timestamped(work_dir: str, pattern: str) -> List[str]:
    return sorted(glob.glob(osp.join(work_dir, '[0-9]*_[0-9]*', pattern)))


def load_test_metrics(work_dir: str) -> Tuple[Dict[str, float], str]:
    """The newest test metrics written into ``work_dir``.

    Args:
        work_dir (str): ``--work-dir`` of a finished test run.

    Returns:
        tuple: ``(metrics, path)``, the metric dict without its
        ``<prefix>/`` key prefix and the json file it came from.
    """
    if not osp.isdir(work_dir):
        raise FileNotFoundError(f'work dir {work_dir!r} does not exist')
    found = []
    # tools/test.py: <ts>/<ts>.json; training logs lie in <ts>/vis_data
    paths = _timestamped(work_dir, '*.json')
    for path in paths:
        try:
            with open(path, encoding='utf-8') as f:
                metrics = json.load(f)
        except ValueError as error:
            if path == paths[-1]:  # an older run's metrics would be wrong
                raise ValueError(
                    f'{path}, the newest test metrics in {work_dir}, is not '
                    f'JSON ({error}); run the test again') from error
            continue
        if isinstance(metrics, dict) and any('/' in k for k in metrics):
            found.append((path, metrics))
    if not found:
        raise FileNotFoundError(
            f'no test metrics in {work_dir}: run tools/dist_test.sh CONFIG '
            f'CHECKPOINT N --work-dir {work_dir} (or tools/test.py) first')
    path, metrics = found[-1]
    checkpoints = glob.glob(osp.join(work_dir, '*.pth'))
    if checkpoints and max(map(osp.getmtime,
                               checkpoints)) > osp.getmtime(path):
        raise RuntimeError(
            f'{max(checkpoints, key=osp.getmtime)} is newer than the newest '
            f'test metrics {path}: the checkpoint was not tested')
    return {
        k.split('/', 1)[1]: v
        for k, v in metrics.items() if '/' in k
    }, path


def format_table(names: Sequence[str], rows: Sequence[Tuple[str,
                                                            list]]) -> str:
    """A plain text table: one row per metric, one column per run.

    Args:
        names (Sequence[str]): Column titles (run names).
        rows (Sequence[tuple]): ``(metric, values)`` per row.

    Returns:
        str: The table.
    """
    width = max(8, *(len(n) for n in names))
    first = max(len(r[0]) for r in rows)
    lines = [' ' * first + ''.join(f'  {n:>{width}}' for n in names)]
    for label, values in rows:
        cells = ''.join(f'  {"-" if v is None else format(v, ".3f"):>{width}}'
                        for v in values)
        lines.append(f'{label:<{first}}{cells}')
    return '\n'.join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """Read, print and save the side-by-side metrics.

    Args:
        argv (list[str], optional): Arguments; ``sys.argv[1:]`` when None.

    Returns:
        int: Exit status.
    """
    args = parse_args(argv)
    names, runs = [], {}
    for run in args.runs:
        name, work_dir = run.split('=', 1)
        metrics, path = load_test_metrics(work_dir)
        names.append(name)
        runs[name] = dict(work_dir=work_dir, metrics_file=path, metrics={})
        for iou in args.iou_types:
            for metric in args.metrics:
                value = metrics.get(f'{iou}_{metric}')
                if value is None:
                    raise KeyError(f'{path} has no {iou}_{metric}; it holds '
                                   f'{sorted(metrics)}')
                runs[name]['metrics'][f'{iou}_{metric}'] = float(value)
    rows = [(f'{iou} {metric}',
             [runs[n]['metrics'][f'{iou}_{metric}'] for n in names])
            for iou in args.iou_types for metric in args.metrics]
    table = format_table(names, rows)
    print(table)
    if args.out:
        os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
        summary = dict(
            runs=runs,
            table=table,
            threads_per_process=os.environ.get('OMP_NUM_THREADS'),
            finite=all(
                math.isfinite(v) for r in runs.values()
                for v in r['metrics'].values()))
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(summary, f, indent=2)
            f.write('\n')
        print(f'wrote {args.out}')
    return 0


if __name__ == '__main__':
    from mmact.utils.refusal import INPUT_ERRORS, run_tool

    # a run that was not tested, or not to the end: one line
    run_tool(main, refuse=INPUT_ERRORS + (RuntimeError, ))
