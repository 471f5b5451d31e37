"""mmact's modules import each other without circles.

The graph has an edge ``a -> b`` for every ``import`` of an mmact module
``b`` written in module ``a`` (at module level or inside a function; a
``from pkg import name`` counts as an import of ``pkg.name`` when that is a
module, else of ``pkg``). The parent packages Python imports implicitly are
not edges: every module would then depend on ``mmact/__init__.py``.
"""
import ast
from pathlib import Path
from typing import Dict, List, Set

import pytest

# reads mmact's sources only
pytestmark = pytest.mark.stack_independent

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def import_graph(package: str = 'mmact') -> Dict[str, Set[str]]:
    """Edges ``module -> imported mmact modules`` of ``package``."""
    files = {_module_name(p): p for p in (ROOT / package).rglob('*.py')}
    graph: Dict[str, Set[str]] = {name: set() for name in files}
    for name, path in files.items():
        is_package = path.name == '__init__.py'
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ''
                if node.level:
                    anchor = name.split('.')
                    anchor = anchor[:len(anchor) - node.level +
                                    (1 if is_package else 0)]
                    base = '.'.join(anchor + ([base] if base else []))
                targets = [
                    f'{base}.{alias.name}'
                    if f'{base}.{alias.name}' in files else base
                    for alias in node.names
                ]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition('.')[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    cycles: List[List[str]] = []

    def visit(node: str) -> None:  # Tarjan
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_find_cycles_sees_a_circle():
    graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}
    assert find_cycles(graph) == [['a', 'b', 'c']]
    assert find_cycles({'a': {'b'}, 'b': set()}) == []


def test_mmact_has_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50 and graph['mmact.models.backbones.act_resnet']
    assert find_cycles(graph) == []
