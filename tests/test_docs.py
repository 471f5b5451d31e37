"""The docs site's API reference covers every registered component."""
import re
from pathlib import Path

from mmact.registry import registered_components

DOCS = Path(__file__).resolve().parents[1] / 'docs'


def test_api_reference_lists_every_registered_component():
    listed = set(
        re.findall(r'^\.\. auto(?:class|function):: (\S+)$',
                   (DOCS / 'api.md').read_text(), re.M))
    registered = set(registered_components())
    assert len(registered) > 30
    assert registered - listed == set(), 'add them to docs/api.md'
    assert listed - registered == set(), 'no longer registered'
