"""Every shell block and Python snippet of the README and the docs site,
one test each (``pytest -m docs_commands``).

A command that runs in under a minute here on generated data is run
(:data:`RUNS`); every other one is checked as far as this machine can: the
program exists, the tool accepts its arguments (its own ``argparse`` parser),
every config it names exists and builds its model, ``make`` targets dry-run,
shell scripts parse, pip requirements parse. A command no check knows fails,
so a new kind of command gets a check with it. Config snippets build the
model (and the optimizer wrapper or hooks) they describe; Python code
compiles and its imports resolve.
"""
import argparse
import ast
import functools
import os
import re
import runpy
import shlex
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

from mmact.testing import free_port
from mmact.testing.doc_blocks import (SHELL_LANGUAGES, Command, DocBlock,
                                      doc_blocks, doc_pages, shell_commands)
from mmact.testing.tool_fork import run_python

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.docs_commands

BLOCKS = [
    b for b in doc_blocks(REPO)
    if b.language in SHELL_LANGUAGES or b.language == 'python'
]
#: placeholders of usage lines -> a value the tools accept
PLACEHOLDERS = {
    'CONFIG': 'configs/toy/apa_mrcnn_r50_toy.py',
    'CHECKPOINT': 'checkpoint.pth',
    'CKPT': 'checkpoint.pth',
    'YOUR_PARTITION': 'gpu',
    '$SLURM_JOB_PARTITION': 'gpu',
    'JOB': 'job',
    'JOB_NAME': 'job',
    'WORK_DIR': 'work_dirs/run',
    'DIR': 'work_dirs/run',
}
#: launcher script -> (python tool, how its arguments map onto the tool's)
LAUNCHERS: Dict[str, Tuple[str, Callable[[List[str]], List[str]]]] = {
    'tools/dist_train.sh': ('tools/train.py', lambda a: [a[0], *a[2:]]),
    'tools/dist_test.sh': ('tools/test.py', lambda a: [a[0], a[1], *a[3:]]),
    'tools/slurm_train.sh':
    ('tools/train.py', lambda a: [a[2], '--work-dir', a[3], *a[4:]]),
    'tools/slurm_test.sh': ('tools/test.py', lambda a: [a[2], a[3], *a[4:]]),
}


class _Parsed(Exception):
    """Raised by the intercepted ``parse_args``: the tool stops there."""

    def __init__(self, parser: argparse.ArgumentParser,
                 args: argparse.Namespace) -> None:
        super().__init__()
        self.parser, self.namespace = parser, args


def parse_tool_args(
        script: str, argv: List[str],
        monkeypatch) -> Tuple[argparse.ArgumentParser, argparse.Namespace]:
    """Run ``script`` until its parser has read ``argv``: a refused
    argument fails the test, nothing after the parsing runs."""
    original = argparse.ArgumentParser.parse_args

    def intercept(self, args=None, namespace=None):
        raise _Parsed(self, original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, 'parse_args', intercept)
    monkeypatch.setattr(sys, 'argv', [str(REPO / script), *argv])
    monkeypatch.setenv('MMACT_BENCH_ALLOCATOR', '1')  # no re-exec
    monkeypatch.syspath_prepend(str(REPO))
    try:
        runpy.run_path(str(REPO / script), run_name='__main__')
    except _Parsed as parsed:
        return parsed.parser, parsed.namespace
    except SystemExit as error:
        pytest.fail(f'{script} refused {argv}: exit {error.code}')
    pytest.fail(f'{script} never parsed its arguments')


@functools.lru_cache(maxsize=None)
def build_config(path: Path) -> None:
    """Load a config and build its model, as the Runner would; once per
    config and process (pages name the same configs many times)."""
    from mmengine.registry import MODELS, DefaultScope

    from mmact.utils.preflight import load_config
    cfg = load_config(str(path))
    scope = cfg.get('default_scope', 'mmdet')
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(cfg.model)
        for key, build in (('optim_wrapper', _optim_wrapper), ('custom_hooks',
                                                               _hooks)):
            if cfg.get(key):
                build(model, cfg[key])
    assert sum(p.numel() for p in model.parameters()) > 0


def _optim_wrapper(model, cfg) -> None:
    from mmengine.optim import build_optim_wrapper
    build_optim_wrapper(model, cfg)


def _hooks(model, cfg) -> None:
    from mmengine.registry import HOOKS
    for hook in cfg:
        HOOKS.build(hook)


def _substitute(word: str) -> str:
    if word.startswith('$('):
        return 'checkpoint.pth'  # $(cat .../last_checkpoint)
    return PLACEHOLDERS.get(word, word)


def _is_synopsis(argv: List[str]) -> bool:
    return any('[' in w or w.rstrip('.') == '...' for w in argv)


def check_python_tool(script: str, argv: List[str], monkeypatch) -> None:
    """The tool exists, takes ``argv`` (a usage line: has every option it
    names), and every config it names builds."""
    assert (REPO / script).is_file(), f'{script} does not exist'
    options = [w.strip('[]').split('=')[0] for w in argv if '--' in w]
    synopsis = _is_synopsis(argv)
    # a usage line (its options in brackets, as argparse prints them), not
    # an example with an optional argument: it names every option
    usage = len(re.findall(r'\[--', ' '.join(argv))) >= 3
    if synopsis:  # without its optional parts
        line = ' '.join(argv)
        while re.search(r'\[[^\[\]]*\]', line):
            line = re.sub(r'\[[^\[\]]*\]', '', line)
        argv = line.split()
    argv = [_substitute(w) for w in argv]
    parser, _ = parse_tool_args(script, argv, monkeypatch)
    known = set(parser._option_string_actions)
    unknown = [o for o in options if o.startswith('--') and o not in known]
    assert not unknown, f'{script} has no option {unknown}'
    if usage:
        absent = {
            action.option_strings[-1]
            for action in parser._actions
            if action.option_strings and action.help != argparse.SUPPRESS
            and not set(action.option_strings) & set(options)
        } - {'--help', '--local-rank'}
        assert not absent, f'the usage line of {script} omits {absent}'
    for word in argv:
        if word.endswith('.py') and ('configs/' in word or 'toy' in word):
            assert (REPO / word).is_file(), f'{word} does not exist'
            build_config(REPO / word)


def check_command(command: Command, monkeypatch) -> None:
    """Check one documented command without running it (see the module
    docstring)."""
    argv = [_substitute(w) for w in command.argv]
    program = argv[0]
    if program == 'make':
        target = [w for w in argv[1:] if '=' not in w]
        result = subprocess.run(['make', '-n', *argv[1:]],
                                cwd=REPO,
                                capture_output=True,
                                text=True)
        assert result.returncode == 0, f'make -n {target}: {result.stderr}'
    elif program in ('pip', 'mim'):
        check_install(argv)
    elif program == 'bash' or program.endswith('.sh'):
        script = argv[1] if program == 'bash' else program
        assert (REPO / script).is_file(), f'{script} does not exist'
        subprocess.run(['bash', '-n', str(REPO / script)], check=True)
        if script in LAUNCHERS:
            tool, mapping = LAUNCHERS[script]
            rest = argv[2:] if program == 'bash' else argv[1:]
            check_python_tool(tool, mapping(rest), monkeypatch)
    elif program.endswith(('python', 'python3')):
        if argv[1:3] == ['-m', 'pytest']:
            check_pytest(argv[3:])
        elif argv[1] == '-m':
            check_python_module(argv[2], argv[3:], monkeypatch)
        else:
            check_python_tool(argv[1], argv[2:], monkeypatch)
    else:
        pytest.fail(f'no check knows the command {" ".join(argv)!r}: add one '
                    'to tests/test_docs_commands.py')


def check_python_module(module: str, argv: List[str], monkeypatch) -> None:
    """``python -m MODULE ARGS``: an mmact module whose parser takes
    ``argv``; nothing after the parsing runs."""
    assert module.startswith('mmact.'), f'{module} is not mmact\'s'
    original = argparse.ArgumentParser.parse_args

    def intercept(self, args=None, namespace=None):
        raise _Parsed(self, original(self, args, namespace))

    monkeypatch.setattr(argparse.ArgumentParser, 'parse_args', intercept)
    monkeypatch.setattr(sys, 'argv', [module, *argv])
    try:
        with warnings.catch_warnings():  # mmact imported it already
            warnings.filterwarnings(
                'ignore', 'found in sys.modules', category=RuntimeWarning)
            runpy.run_module(module, run_name='__main__')
    except _Parsed:
        return
    except SystemExit as error:
        pytest.fail(f'python -m {module} refused {argv}: exit {error.code}')
    pytest.fail(f'python -m {module} never parsed its arguments')


def check_install(argv: List[str]) -> None:
    """``pip install`` / ``mim install`` (and ``uninstall``): the
    requirements parse."""
    from packaging.requirements import Requirement
    assert argv[1] in ('install', 'uninstall'), argv
    words, skip = argv[2:], False
    for word in words:
        if skip:
            skip = False
        elif word in ('--index-url', '-i', '--extra-index-url'):
            skip = True
        elif word in ('-U', '--upgrade', '-e', '-y', '--yes', '--no-cache-dir',
                      '--no-build-isolation'):
            continue
        elif word == '.':
            assert (REPO / 'setup.py').is_file()
        else:
            Requirement(word)


def check_pytest(argv: List[str]) -> None:
    """The test paths exist and the markers are registered."""
    markers = re.findall(r'^    (\w+):', (REPO / 'setup.cfg').read_text(),
                         re.M)
    words = iter(argv)
    for word in words:
        if word == '-m':
            expression = next(words)
            names = set(re.findall(r'\w+', expression)) - {'and', 'or', 'not'}
            assert names <= set(markers), f'unknown markers in {expression}'
        elif not word.startswith('-'):
            assert (REPO / word.split('::')[0]).exists(), f'{word} is absent'


def check_python(block: DocBlock) -> None:
    """A config snippet builds; Python code compiles and imports."""
    tree = ast.parse(block.text)
    if _is_config(tree):
        _build_snippet(block.text)
        return
    package = _package_of(block.text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ''
            if node.level:
                assert package, f'{block.name}: relative import, no path'
                parts = package.split('.')
                base = '.'.join(parts[:len(parts) - node.level + 1])
                module = f'{base}.{module}' if module else base
            if module in _walkthrough_modules(block):
                continue  # a file the page itself adds
            imported = __import__(module, fromlist=['_'])
            for alias in node.names:
                assert hasattr(imported, alias.name), (
                    f'{block.name}: {module} has no {alias.name}')
        elif isinstance(node, ast.Import):
            for alias in node.names:
                __import__(alias.name)


def _is_config(tree: ast.Module) -> bool:
    """Only assignments at top level (a config or a fragment of one)."""
    return all(isinstance(node, ast.Assign) for node in tree.body)


def _package_of(text: str) -> str:
    """``# mmact/ops/my_act.py`` -> ``'mmact.ops'``."""
    match = re.match(r'#\s*([\w/]+)\.py', text)
    return match.group(1).rsplit('/', 1)[0].replace('/', '.') if match else ''


def _walkthrough_modules(block: DocBlock) -> set:
    """Modules the page's snippets add (``# mmact/ops/my_act.py`` heads
    one): a walkthrough's new files import each other."""
    return {
        re.match(r'#\s*([\w/]+)\.py', b.text).group(1).replace('/', '.')
        for b in BLOCKS if b.page == block.page and b.language == 'python'
        and re.match(r'#\s*([\w/]+)\.py', b.text)
    }


#: what a config fragment (no ``_base_`` of its own) is added to
FRAGMENT_BASE = ("_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'\n"
                 "custom_imports = dict(imports=['mmact'])\n")


def _build_snippet(text: str) -> None:
    """Build a config snippet; a fragment is added to mmdet's Mask R-CNN."""
    import tempfile
    assigned = {
        target.id
        for node in ast.parse(text).body
        for target in node.targets if isinstance(target, ast.Name)
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / 'snippet.py'
        path.write_text(text if '_base_' in assigned else FRAGMENT_BASE + text)
        build_config(path)


def _first_command(block: DocBlock) -> str:
    for line in block.text.splitlines():
        if line.strip() and not line.startswith('#'):
            return line.strip()
    return ''


# ---------------------------------------------------------------------------
# blocks that run here, on generated data
# ---------------------------------------------------------------------------
RUNS: Dict[Tuple[str, str], Callable[[DocBlock, Path], None]] = {}


def runs(page: str, first_command: str):
    """Register the runner of the block of ``page`` that starts with
    ``first_command``; :func:`test_every_run_names_a_block` keeps the
    table in step with the pages."""

    def register(function):
        RUNS[(page, first_command)] = function
        return function

    return register


def test_every_run_names_a_block():
    present = {(b.page, _first_command(b)) for b in BLOCKS}
    assert set(RUNS) <= present, sorted(set(RUNS) - present)


def test_every_page_block_is_collected():
    """A fenced block with a language this module does not know fails
    here, rather than go untested."""
    known = set(SHELL_LANGUAGES) | {
        'python', 'text', 'bibtex', 'yaml', 'toctree', 'eval-rst', 'include',
        'c', 'cpp', 'json'
    }
    unknown = [
        b.name for b in doc_blocks(REPO)
        if b.language not in known and not b.language.startswith('{')
    ]
    assert not unknown, f'blocks of unknown languages: {unknown}'


def run_shell(block: DocBlock,
              cwd: Path,
              replace: Dict[str, str] = None,
              timeout: int = 600,
              with_stderr: bool = False) -> str:
    """Run a block's commands in ``cwd`` with this interpreter (after
    ``replace``), each to success; their output (and errors)."""
    text = block.text
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    out = []
    for command in shell_commands(text):
        argv = [
            str(REPO / w) if w.startswith('tools/') else w
            for w in command.argv
        ]
        env = dict(os.environ, PYTHON=sys.executable, **command.env)
        if argv[0] == 'python' and argv[1] != '-m':
            result = run_python(argv[1:], cwd=cwd, env=env, timeout=timeout)
        else:
            if argv[0] == 'python':
                argv[0] = sys.executable
            result = subprocess.run(argv,
                                    cwd=cwd,
                                    env=dict(env, PORT=free_port()),
                                    capture_output=True,
                                    text=True,
                                    timeout=timeout)
        assert result.returncode == 0, (
            f'{block.name}: {" ".join(argv)}\n{result.stderr[-3000:]}')
        out.append(result.stdout + (result.stderr if with_stderr else ''))
    return '\n'.join(out)


def _authors_lvis_release(path: Path) -> None:
    """A file in the layout of the authors' LVIS R50 release: their key
    names, the model's initial weights (see
    tests/test_tools/test_apa_to_mmact.py)."""
    import torch
    from mmengine.registry import MODELS, DefaultScope

    from mmact.utils.preflight import load_config
    cfg = load_config(str(REPO / 'configs/lvis/apa_mrcnn_r50.py'))
    cfg.model.backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(cfg.model)
    names = ((r'\.act([123])\.', r'.unirect\1.'), (r'\.attn\.norm\.',
                                                   '.se.norm.'),
             (r'\.attn\.fc1\.', '.se.excitation.0.'), (r'\.attn\.fc2\.',
                                                       '.se.excitation.2.'),
             (r'\.attn\.gate\.', '.se.uniact.'), (r'conv_logits\.scale_root',
                                                  'conv_logits.tempearture'))
    state = {}
    for key, value in model.state_dict().items():
        for pattern, repl in names:
            key = re.sub(pattern, repl, key)
        if key.endswith('tempearture'):
            value = value.reshape(())
        state[key] = value
    torch.save({'state_dict': state, 'meta': {'epoch': 24}}, path)


#: the authors' LVIS R50 detector converted, named as the model zoo names it
AUTHORS_LVIS_R50 = ('work_dirs/authors/mask-rcnn_apase-aglu-r50_fpn_gol-'
                    'normmask_8xb2-rfs-ms-2x_lvis-v1.pth')


@runs(
    'docs/user_guides/checkpoints.md',
    'python tools/model_converters/apa_to_mmact.py epoch_24.pth ' +
    AUTHORS_LVIS_R50)
def run_authors_conversion(block: DocBlock, cwd: Path, monkeypatch) -> None:
    """The conversion runs on a file in their layout; the test command
    (LVIS, 8 GPUs) is checked."""
    _authors_lvis_release(cwd / 'epoch_24.pth')
    convert, test = block.text.split('# lvis:')
    converted = run_shell(block._replace(text=convert), cwd)
    config = re.search(r'loads with strict=True into (\S+);', converted)[1]
    assert config in test
    assert (cwd / AUTHORS_LVIS_R50).is_file()
    for command in shell_commands(test.split('\n', 1)[1]):
        check_command(command, monkeypatch)


@runs(
    'docs/user_guides/checkpoints.md',
    'tools/dist_train.sh configs/lvis/mask-rcnn_apase-aglu-r50_fpn_gol-'
    'normmask_8xb2-rfs-ms-2x_lvis-v1.py 8 \\')
def run_fine_tune(block: DocBlock, cwd: Path, monkeypatch) -> None:
    """Fine-tuning from the converted detector, as written: the config on
    the generated LVIS set (two iterations, one CPU process for the 8
    GPUs), its ImageNet init_cfg file absent as on a fresh machine."""
    from mmact.testing import FORMATS, adapt_config, generate_toy_data
    from mmact.utils.preflight import load_config
    _authors_lvis_release(cwd / 'epoch_24.pth')
    converted = run_python([
        REPO / 'tools/model_converters/apa_to_mmact.py', 'epoch_24.pth',
        AUTHORS_LVIS_R50, '--no-validate'
    ],
                           cwd=cwd,
                           timeout=600)
    assert converted.returncode == 0, converted.stderr[-3000:]
    [config] = re.findall(r'configs/\S+\.py', block.text)
    cfg = load_config(str(REPO / config))
    data = generate_toy_data('lvis', str(cwd / 'toy_lvis'))
    toy = adapt_config(cfg, data, FORMATS['lvis'].defaults['num_classes'])
    toy.model.backbone.init_cfg = cfg.model.backbone.init_cfg  # absent here
    assert not (cwd / toy.model.backbone.init_cfg.checkpoint).exists()
    (cwd / config).parent.mkdir(parents=True)
    toy.dump(str(cwd / config))
    out = run_shell(block, cwd, replace={' 8 ': ' 1 '}, with_stderr=True)
    assert f'load_from {AUTHORS_LVIS_R50!r} holds the ' \
        'backbone.* weights it would initialise, so it is skipped' in out


@runs('docs/user_guides/datasets.md',
      'python tools/misc/check_data.py configs/lvis/apa_mrcnn_r50.py')
def run_check_data(block: DocBlock, cwd: Path, monkeypatch) -> None:
    """The data check of the LVIS config on a generated LVIS v1 root in
    the real layout (data/lvis_v1/)."""
    from mmact.testing import generate_toy_data
    generate_toy_data('lvis', str(cwd / 'data/lvis_v1'))
    (cwd / 'configs').symlink_to(REPO / 'configs')
    out = run_shell(block, cwd)
    assert 'the data of train, val, test is complete' in out


@runs(
    'docs/user_guides/inference.md',
    'python tools/misc/infer_image.py configs/lvis/apa_mrcnn_r50.py '
    'work_dirs/apa_mrcnn_r50/epoch_24.pth demo.jpg --out-dir outputs')
def run_infer_image(block: DocBlock, cwd: Path, monkeypatch) -> None:
    """The drawing of a generated image by the toy version of the config
    (20 classes, small images) at untrained weights."""
    import torch
    from mmengine.registry import MODELS, DefaultScope

    from mmact.testing import generate_toy_data
    from mmact.utils.preflight import load_config
    toy = 'configs/toy/apa_mrcnn_r50_toy.py'
    data = Path(generate_toy_data('lvis', str(cwd / 'lvis')))
    (cwd / 'demo.jpg').write_bytes(
        sorted((data / 'val2017').iterdir())[0].read_bytes())
    with DefaultScope.overwrite_default_scope('mmdet'):
        model = MODELS.build(load_config(str(REPO / toy)).model)
    (cwd / 'work_dirs/apa_mrcnn_r50').mkdir(parents=True)
    torch.save({
        'state_dict': model.state_dict(),
        'meta': {}
    }, cwd / 'work_dirs/apa_mrcnn_r50/epoch_24.pth')
    run_shell(
        block, cwd, replace={'configs/lvis/apa_mrcnn_r50.py': str(REPO / toy)})
    assert (cwd / 'outputs/vis/demo.jpg').stat().st_size > 0
    assert (cwd / 'outputs/preds/demo.json').is_file()


@runs('docs/user_guides/inference.md', 'import numpy as np')
def run_onnx_export(block: DocBlock, cwd: Path, monkeypatch) -> None:
    """The export snippet as written: the backbone exports and
    onnxruntime gives the same features (its own assertion)."""
    monkeypatch.chdir(cwd)
    exec(compile(block.text, block.name, 'exec'), {'__name__': '__main__'})
    import onnx
    graph = onnx.load(str(cwd / 'apase_aglu_r50.onnx')).graph
    assert {node.domain for node in graph.node} <= {'', 'ai.onnx'}


def _uses_the_stack(block: DocBlock) -> bool:
    """Whether the block's test runs torch code (mmact/testing/
    stack_rule.py): it runs the block, builds a config (a config snippet, a
    config a command names) or runs a Python tool or module up to its
    parser. Make targets, pip requirements, shell scripts and Python
    imports are read only, the same on both stacks."""
    if (block.page, _first_command(block)) in RUNS:
        return True
    if block.language == 'python':
        return _is_config(ast.parse(block.text))
    for command in shell_commands(block.text):
        program = command.argv[0]
        if program.endswith(('python', 'python3')):
            if command.argv[1:3] != ['-m', 'pytest']:
                return True
        elif program == 'bash' or program.endswith('.sh'):
            script = command.argv[1] if program == 'bash' else program
            if script in LAUNCHERS:
                return True
    return False


def _block_params() -> list:
    """Every block; those whose test uses nothing of the stack run once, on
    the default one (make test-torch2.1 leaves them out), the others on
    both."""
    return [
        pytest.param(
            b,
            id=b.name,
            marks=() if _uses_the_stack(b) else pytest.mark.stack_independent)
        for b in BLOCKS
    ]


@pytest.mark.parametrize('block', _block_params())
def test_documented_block(block: DocBlock, monkeypatch, tmp_path):
    run = RUNS.get((block.page, _first_command(block)))
    if run is not None:
        run(block, tmp_path, monkeypatch)
    elif block.language == 'python':
        check_python(block)
    else:
        commands = shell_commands(block.text)
        assert commands, f'{block.name}: a shell block without a command'
        for command in commands:
            check_command(command, monkeypatch)


# ---------------------------------------------------------------------------
# what the pages say against what the code does
# ---------------------------------------------------------------------------
SLURM_LAUNCHERS = ('tools/slurm_train.sh', 'tools/slurm_test.sh')
#: the partition's one spelling: the placeholder a user replaces, and inside
#: a batch script the variable slurm sets from ``#SBATCH --partition=``
PARTITION, BATCH_PARTITION = 'YOUR_PARTITION', '$SLURM_JOB_PARTITION'
SLURM_BLOCKS = [
    b for b in BLOCKS if b.language in SHELL_LANGUAGES and any(
        launcher in b.text for launcher in SLURM_LAUNCHERS)
]


@pytest.mark.parametrize('block', SLURM_BLOCKS, ids=lambda b: b.name)
def test_slurm_example_spells_the_partition_one_way(block: DocBlock):
    """A batch script asks for ``--partition=YOUR_PARTITION`` in its
    ``#SBATCH`` lines and hands the launcher ``"$SLURM_JOB_PARTITION"``;
    a command outside one hands it ``YOUR_PARTITION``. Each launcher gets
    its four positional arguments."""
    lines = block.text.splitlines()
    sbatch = [line for line in lines if line.startswith('#SBATCH')]
    if sbatch:
        assert lines[0] == '#!/usr/bin/env bash', block.name
        subprocess.run(['bash', '-n'], input=block.text, text=True,
                       check=True)
        options = [w for line in sbatch for w in shlex.split(line)[1:]]
        assert all(o.startswith('--') for o in options), options
        partitions = [o for o in options if o.startswith('--partition')]
        assert partitions == [f'--partition={PARTITION}'], block.name
    launches = [
        c for c in shell_commands(block.text) if c.argv[0] in SLURM_LAUNCHERS
    ]
    assert launches, block.name
    for command in launches:
        assert command.argv[1] == (BATCH_PARTITION if sbatch else PARTITION), \
            f'{block.name}: {" ".join(command.argv)}'
        assert len([w for w in command.argv[1:5]
                    if not w.startswith('-')]) == 4, command.argv


def test_slurm_examples_exist_and_pages_use_no_other_partition_spelling():
    assert sum('#SBATCH' in b.text for b in SLURM_BLOCKS) >= 3
    other = re.compile(r'(?<![\w$])\$?\{?PARTITION\b|\bsrun -p\b')
    for page in doc_pages(REPO):
        for number, line in enumerate(page.read_text().splitlines(), 1):
            assert not other.search(line), \
                f'{page.relative_to(REPO)}:{number}: {line}'


#: image folders no config key names: the annotations name the images
#: below data_root (mmdet's LVISV1Dataset turns coco_url into
#: train2017/<name> or val2017/<name>; V3Det's file_name is images/...)
IMAGES_NAMED_BY_ANNOTATIONS = {
    'data/lvis_v1/train2017/', 'data/lvis_v1/val2017/', 'data/V3Det/images/'
}
DATASET_CONFIG_DIRS = ('coco', 'lvis', 'v3det', 'objects365', 'imagenet')


def _braces(word: str) -> List[str]:
    """``a_{train,val}.json`` -> ``['a_train.json', 'a_val.json']``."""
    match = re.search(r'\{([^{}]*)\}', word)
    if not match:
        return [word]
    return [
        expanded for part in match[1].split(',')
        for expanded in _braces(word[:match.start()] + part +
                                word[match.end():])
    ]


def doc_layouts() -> List[Tuple[DocBlock, set]]:
    """Every ``data/`` tree of the pages and the paths it lays out: a
    folder at two spaces' indent is a data root, the words after it and
    on the deeper lines below are paths in it; (...) is a comment."""
    layouts = []
    for block in doc_blocks(REPO):
        if not block.text.startswith('data/\n'):
            continue
        paths, root = set(), None
        for line in block.text.splitlines()[1:]:
            line = re.sub(r'\([^)]*\)', '', line)
            match = re.match(r'^  (\S+/)(.*)$', line)
            if match:
                root, line = 'data/' + match[1], match[2]
            for word in line.split():
                paths.update(root + path for path in _braces(word))
        layouts.append((block, paths))
    return layouts


@functools.lru_cache(maxsize=None)
def dataset_config_paths() -> Dict[str, Tuple[str, ...]]:
    """Path -> the configs that read it: what ``tools/misc/check_data.py``
    checks (``data_root`` joined with ``ann_file`` and ``data_prefix``,
    the evaluators' files), and the files a dataset class reads by a
    default argument (V3Det's ``label_file``)."""
    read: Dict[str, List[str]] = {}
    configs = sorted(p for folder in DATASET_CONFIG_DIRS
                     for p in (REPO / 'configs' / folder).glob('*.py'))
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as empty:
        os.chdir(empty)  # nothing exists there: every path is reported
        try:
            for config in configs:
                for path in _paths_read(config):
                    read.setdefault(path, []).append(
                        config.relative_to(REPO).as_posix())
        finally:
            os.chdir(here)
    return {path: tuple(names) for path, names in read.items()}


def _paths_read(config: Path) -> set:
    from mmengine.registry import DefaultScope

    from mmact.utils.preflight import load_config
    from mmact.utils.preflight.data_paths import (_dataset_class,
                                                  _leaf_datasets,
                                                  inspect_data_paths)
    cfg = load_config(str(config))
    missing, _ = inspect_data_paths(cfg, ('train', 'val', 'test'))
    paths = {m.rsplit(' (', 1)[0] for m in missing}
    scope = cfg.get('default_scope')
    with DefaultScope.overwrite_default_scope(scope):
        for split in ('train', 'val', 'test'):
            loader = cfg.get(f'{split}_dataloader') or {}
            for _, dataset in _leaf_datasets(loader.get('dataset'), split):
                paths.update(
                    _default_files(dataset, _dataset_class(dataset, scope)))
    return {
        os.path.normpath(p) + ('/' if p.endswith('/') else '')
        for p in paths
    }


def _default_files(dataset: dict, cls) -> List[str]:
    import inspect
    if cls is None:
        return []
    files = []
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name.endswith('_file') and name != 'ann_file' and isinstance(
                parameter.default, str) and name not in dataset:
            files.append(os.path.join(dataset.get('data_root') or '',
                                      parameter.default))
    return files


@pytest.mark.stack_independent  # configs of the pinned mmdet
def test_every_dataset_layout_is_what_the_configs_read():
    """Each path a page lays out under ``data/`` is one a config reads (or
    an image folder its annotations name); the full layout of
    datasets.md holds every path every dataset config reads."""
    read = dataset_config_paths()
    layouts = doc_layouts()
    assert {b.page for b, _ in layouts} >= {
        'docs/user_guides/datasets.md', 'docs/user_guides/train_test.md'
    }
    for block, paths in layouts:
        for path in sorted(paths):
            same_name = sorted(p for p in read if p.endswith(
                '/' + path.rstrip('/').rsplit('/', 1)[-1] + '/' *
                path.endswith('/')))
            assert path in read or path in IMAGES_NAMED_BY_ANNOTATIONS, (
                f'{block.name}: {path}: no config reads it (they read '
                f'{same_name})')
    [full] = [p for b, p in layouts if b.page.endswith('datasets.md')]
    absent = {path: read[path] for path in read if path not in full}
    assert not absent, f'docs/user_guides/datasets.md omits {absent}'


@pytest.mark.stack_independent  # configs of the pinned mmdet
def test_model_zoo_converts_the_backbones_the_detectors_read(monkeypatch):
    """For each authors' ImageNet model whose backbone a detection config
    initialises from (``init_cfg`` checkpoint ``work_dirs/<config
    name>/...``), the zoo gives the ``--backbone-only`` conversion to
    that path; every command of the zoo is one the converter takes."""
    import yaml
    page = (REPO / 'docs/model_zoo.md').read_text()
    released = {
        Path(model['Config']).stem
        for metafile in (REPO / 'configs').glob('*/metafile.yml')
        for model in yaml.safe_load(metafile.read_text())['Models']
        if 'Converted From' in model
    }
    from mmact.utils.preflight import load_config
    read = set()
    for folder in ('coco', 'lvis', 'v3det', 'objects365'):
        for config in (REPO / 'configs' / folder).glob('*.py'):
            init = load_config(str(config)).model.backbone.get('init_cfg')
            checkpoint = str((init or {}).get('checkpoint', ''))
            match = re.fullmatch(r'work_dirs/([^/]+)/epoch_\d+\.pth',
                                 checkpoint)
            if match and match[1] in released:
                read.add(checkpoint)
    assert 'work_dirs/apase-aglu-r50_8xb32-coslr-100e_in1k/epoch_100.pth' \
        in read
    for checkpoint in read:
        assert (f'`python tools/model_converters/apa_to_mmact.py '
                f'THEIR_CHECKPOINT.pth {checkpoint} --backbone-only`'
                in page), checkpoint
    commands = re.findall(r'`(python tools/model_converters/\S+ [^`]*)`',
                          page)
    assert len(commands) >= len(released) + len(read)
    for command in set(commands):
        argv = command.split()
        parse_tool_args(argv[1], argv[2:], monkeypatch)


def test_faq_missing_imagenet_checkpoint_stops_as_it_says(tmp_path):
    """The FAQ's message is what tools/train.py prints for the LVIS config
    without its ImageNet backbone, in its first checks: the data (absent
    here too) is not reached."""
    faq = (REPO / 'docs/faq.md').read_text()
    section = faq[faq.index('## "Pretrained checkpoints of this config'):]
    section = section[:section.index('\n## ', 1)]
    [message] = re.findall(r'^```text\n(.*?)^```', section, re.M | re.S)
    assert 'before it reads the datasets' in ' '.join(section.split())
    (tmp_path / 'configs').symlink_to(REPO / 'configs')
    result = run_python(
        [REPO / 'tools/train.py', 'configs/lvis/apa_mrcnn_r50.py'],
        cwd=tmp_path,
        timeout=300)
    assert result.returncode != 0
    assert ' '.join(message.split()) in ' '.join(result.stderr.split()), \
        result.stderr[-2000:]
    assert 'Dataset paths' not in result.stderr
