"""tools/gpu/gpu_check.sh without a GPU: its dry run on the CPU (every part's
script at smoke sizes, gpu.json with every key), a stopped call, a failing
part, the no-GPU line; tools/gpu/gpu_json.py (assembly, the table of
docs/benchmarks/gpu.md against docs/benchmarks/gpu.json)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mmact.testing.python_stand_in import PythonStandIn

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'tools/gpu/gpu_check.sh'
sys.path.insert(0, str(REPO / 'tools/gpu'))

import gpu_json  # noqa: E402

#: Parts whose figures need a GPU (null in a dry run).
MEMORY_KEYS = {('step', 'memory_float32'), ('step', 'memory_bfloat16'),
               ('step', 'mask_rcnn_lvis_memory_float32'),
               ('step', 'mask_rcnn_lvis_memory_amp')}
#: Sections a dry run leaves null: compute-sanitizer runs on a GPU only.
GPU_ONLY_SECTIONS = {'sanitizer'}


def check_env(parts=None, dry=True, python=sys.executable, **env_extra):
    """gpu_check.sh's environment: its switches, the interpreter."""
    # the suite's switches left out; its build cache kept (the builds shared)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(('GPU_CHECK_', 'MALLOC_', 'MMACT_'))
        and k != 'TRITON_INTERPRET' or k == 'MMACT_CACHE_DIR'
    }
    env['PYTHON'] = python
    if dry:
        env['GPU_CHECK_DRY_RUN'] = '1'
    if parts:
        env['GPU_CHECK_PARTS'] = parts
    env.update(env_extra)
    return env


def gpu_check(tmp_path, parts=None, dry=True, env=None, **env_extra):
    """Start gpu_check.sh with its log under tmp_path (and ``env``, or
    :func:`check_env`'s); returns the Popen."""
    return subprocess.Popen(
        ['bash', str(SCRIPT),
         str(tmp_path / 'gpu_check.log')],
        cwd=REPO,
        env=env or check_env(parts, dry, **env_extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True)


def finish(proc, timeout=900):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc.returncode, out


def all_keys(data):
    """{(section, key)} of a gpu.json, top-level scalars as (key, None)."""
    keys = set()
    for key, value in data.items():
        if isinstance(value, dict):
            keys |= {(key, k) for k in value}
        else:
            keys.add((key, None))
    return keys


def test_docs_json_has_exactly_the_keys_and_the_page_shows_it():
    data = json.loads(gpu_json.DOC_JSON.read_text())
    assert all_keys(data) == all_keys(gpu_json.empty())
    assert 'dry_run' not in data
    assert data['commit'] and data['gpu'] and data['date']
    # the page's table is the json's, rendered
    assert gpu_json.doc_block(
        gpu_json.DOC.read_text()) == gpu_json.render_table(data)
    assert subprocess.run(
        [sys.executable, 'tools/gpu/gpu_json.py', 'table', '--check'],
        cwd=REPO).returncode == 0
    # every figure of gpu.json has its row
    assert {tuple(k.split('.'))
            for k in gpu_json.ROWS} == {(s, k)
                                        for s, keys in gpu_json.KEYS.items()
                                        for k in keys}


def test_table_check_fails_when_page_and_json_differ(tmp_path):
    data = json.loads(gpu_json.DOC_JSON.read_text())
    data['wall']['aglu_silu_float32'] = 99.0
    (tmp_path / 'gpu.json').write_text(json.dumps(data))
    (tmp_path / 'gpu.md').write_text(gpu_json.DOC.read_text())
    cmd = [
        sys.executable, 'tools/gpu/gpu_json.py', 'table', '--json',
        str(tmp_path / 'gpu.json'), '--doc',
        str(tmp_path / 'gpu.md')
    ]
    proc = subprocess.run(
        cmd + ['--check'], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1 and 'table --write' in proc.stdout
    assert subprocess.run(cmd + ['--write'], cwd=REPO).returncode == 0
    assert '| 99.00x |' in (tmp_path / 'gpu.md').read_text()
    assert subprocess.run(cmd + ['--check'], cwd=REPO).returncode == 0


def test_assemble_merges_summaries_and_marks_parts(tmp_path):
    (tmp_path / 'order').write_text('ops host_cost mask_rcnn dist')
    (tmp_path / 'ops.status').write_text('passed\n')
    (tmp_path / 'ops.json').write_text(
        json.dumps(
            dict(
                summary=dict(
                    wall=dict(aglu_silu_float32=2.0, unknown=1.0),
                    saved=dict(aglu_float32=1.0),
                    other=dict(x=1)))))
    (tmp_path / 'host_cost.status').write_text('failed: ValueError: x\n')
    (tmp_path / 'mask_rcnn.status').write_text('stopped\n')
    data = gpu_json.assemble(tmp_path, dict(gpu='G', torch='T', extra='E'),
                             None, 12.4)
    assert all_keys(data) == all_keys(gpu_json.empty())
    assert data['gpu'] == 'G' and data['driver'] is None
    assert data['wall']['aglu_silu_float32'] == 2.0
    assert data['wall']['aglu_silu_bfloat16'] is None
    assert data['saved']['aglu_float32'] == 1.0
    assert data['gpu_check'] == dict(
        exit=None,
        seconds=12,
        parts_run=dict(
            ops='passed',
            host_cost='failed: ValueError: x',
            mask_rcnn='stopped',
            dist='left'))
    assert gpu_json.assemble(tmp_path, dry_run=True)['dry_run'] is True


def test_sanitizer_verdicts(tmp_path):
    """compute-sanitizer's logs to gpu.json's sanitizer section: clean, an
    error count, a run that stopped before its summary, a tool not run; the
    command exits 1 unless every tool is clean."""
    (tmp_path / 'racecheck.log').write_text(
        '========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 '
        'warnings)\n========= ERROR SUMMARY: 0 errors\n')
    (tmp_path / 'synccheck.log').write_text(
        '========= Barrier error detected. Divergent thread(s) in block\n'
        '========= ERROR SUMMARY: 2 errors\n')
    (tmp_path / 'initcheck.log').write_text('Traceback (most recent call)\n')
    assert gpu_json.sanitizer_summary(tmp_path) == dict(summary=dict(
        sanitizer=dict(racecheck='clean', synccheck='2 errors',
                       initcheck='no summary')))
    (tmp_path / 'initcheck.log').unlink()
    out = tmp_path / 'cuda_kernels.json'
    cmd = [sys.executable, 'tools/gpu/gpu_json.py', 'sanitizer', str(tmp_path),
           str(out)]
    assert subprocess.run(cmd, cwd=REPO).returncode == 1
    verdicts = json.loads(out.read_text())['summary']['sanitizer']
    assert verdicts['initcheck'] == 'not run'
    (tmp_path / 'order').write_text('cuda_kernels')
    data = gpu_json.assemble(tmp_path)
    assert data['sanitizer'] == verdicts
    assert '| `sanitizer.synccheck` | 2 errors | clean |' in (
        gpu_json.render_table(data))
    for tool in gpu_json.SANITIZER_TOOLS:
        (tmp_path / f'{tool}.log').write_text('ERROR SUMMARY: 0 errors\n')
    assert subprocess.run(cmd, cwd=REPO).returncode == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason='a CUDA GPU is here')
def test_without_a_gpu_one_line_and_exit_1(tmp_path):
    code, out = finish(gpu_check(tmp_path, dry=False), 300)
    assert code == 1
    # the launchers' interpreter line (tools/launcher_common.sh), then one
    # line that says why nothing ran
    interpreter, refusal = out.strip().splitlines()
    assert interpreter.startswith('gpu_check.sh: interpreter ')
    assert 'no CUDA GPU' in refusal and 'GPU_CHECK_DRY_RUN=1' in refusal


def test_unknown_part_is_named(tmp_path):
    code, out = finish(gpu_check(tmp_path, parts='ops nope'), 60)
    assert code == 2
    assert "'nope'" in out and 'host_cost_triton' in out


@pytest.mark.slow
def test_dry_run_runs_every_part_and_writes_every_key(tmp_path, load_tool):
    # The parts' interpreters forked from a warm one (python_stand_in): the
    # environment they get from gpu_check.sh (the launchers' PYTHONPATH, its
    # exports), the benchmark scripts' heap settings already set (the
    # scripts then run as they are, not once more to set them); a part that
    # sets import-time switches of its own (the Triton row, the CUDA row)
    # and the launchers' workers start the real interpreter.
    stand_in = tmp_path / 'python'
    heap = load_tool('tools/benchmarks/bench_utils.py').GLIBC_HEAP
    env = check_env(python=str(stand_in / 'bin/python'), **heap)
    served = dict(
        env,
        PYTHONPATH=f'{REPO}/tools/..:{env.get("PYTHONPATH", "")}',
        PYTHONUNBUFFERED='1')
    start = time.time()
    docs_json = gpu_json.DOC_JSON.read_text()
    per_call = ('PORT', 'GPU_CHECK_COMMIT', 'GPU_CHECK_DRIVER')
    with PythonStandIn(served, stand_in, per_call=per_call) as python:
        code, out = finish(gpu_check(tmp_path, env=env))
    data = json.loads((tmp_path / 'gpu.json').read_text())
    assert all_keys(data) == all_keys(gpu_json.empty()) | {('dry_run', None)}
    assert data['dry_run'] is True
    parts = data['gpu_check']['parts_run']
    assert list(parts) == [row.split()[0] for row in _part_table()]
    assert all(s == 'passed' or s.startswith('skipped')
               for s in parts.values()), (parts, out[-3000:])
    assert code == 0 and data['gpu_check']['exit'] == 0, out[-3000:]
    assert 0 < data['gpu_check']['seconds'] <= time.time() - start + 1
    assert data['torch'] == torch.__version__ and data['commit']
    assert data['gpu'] is None and data['driver'] is None
    for section, keys in gpu_json.KEYS.items():
        for key in keys:
            value = data[section][key]
            if ((section, key) in MEMORY_KEYS
                    or section in GPU_ONLY_SECTIONS or
                    (section == 'host_cost_triton'
                     and parts['host_cost_triton'].startswith('skipped'))):
                assert value is None, (section, key)
            else:
                assert isinstance(value, float) and value > 0, (section, key)
    # only a GPU run writes the docs' figures
    assert gpu_json.DOC_JSON.read_text() == docs_json
    log = (tmp_path / 'gpu_check.log').read_text()
    for name in parts:
        assert f'===== {name} (dry run' in log
        assert (tmp_path / 'parts' / f'{name}.log').exists()
    assert 'mmcv_cuda' not in log  # no build
    assert 'gpu_check: all parts passed' in out


def _part_table():
    text = SCRIPT.read_text()
    block = text[text.index('PART_TABLE=(') + len('PART_TABLE=('):]
    block = block[:block.index('\n)')]
    return [
        line.strip().strip('"') for line in block.splitlines() if line.strip()
    ]


@pytest.mark.slow
def test_a_failing_part_is_named_and_the_others_run(tmp_path):
    # mmact refuses this value at import: the host_cost part fails, the
    # Triton row (which sets MMACT_TRITON itself) still runs
    code, out = finish(
        gpu_check(
            tmp_path, parts='host_cost host_cost_triton',
            MMACT_TRITON='bogus'))
    assert code == 1
    data = json.loads((tmp_path / 'gpu.json').read_text())
    parts = data['gpu_check']['parts_run']
    assert parts['host_cost'].startswith('failed: ')
    assert 'MMACT_TRITON' in parts['host_cost']
    summary = out[out.index('===== summary'):]
    assert 'host_cost ' in summary and 'MMACT_TRITON' in summary
    assert parts['host_cost_triton'] == 'passed' or parts[
        'host_cost_triton'].startswith('skipped')
    assert data['host_cost']['aglu_silu'] is None
    assert data['gpu_check']['exit'] == 1


@pytest.mark.slow
def test_a_stopped_call_keeps_its_figures_and_names_the_parts_left(tmp_path):
    proc = gpu_check(tmp_path, parts='host_cost mask_rcnn dist')
    status = tmp_path / 'parts/mask_rcnn.status'
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if status.exists() and status.read_text().strip() == 'running':
            break
        time.sleep(0.5)
    assert proc.poll() is None, 'gpu_check ended before mask_rcnn started'
    time.sleep(2)
    proc.send_signal(signal.SIGTERM)
    code, out = finish(proc, 120)
    assert code == 143
    data = json.loads((tmp_path / 'gpu.json').read_text())
    assert data['gpu_check']['exit'] is None
    assert data['gpu_check']['parts_run'] == dict(
        host_cost='passed', mask_rcnn='stopped', dist='left')
    assert isinstance(data['host_cost']['aglu_silu'], float)
    assert 'parts left: mask_rcnn dist' in out
    assert 'GPU_CHECK_PARTS="mask_rcnn dist"' in out
    # the part's processes ended with it
    time.sleep(1)
    ps = subprocess.run(['ps', '-eo', 'args'], capture_output=True,
                        text=True).stdout
    assert str(tmp_path / 'parts/mask_rcnn.json') not in ps
