"""Sphinx configuration of mmact's documentation (``make docs``)."""
import importlib.util
import os
import sys

sys.path.insert(0, os.path.abspath('..'))

project = 'mmact'
author = 'mmact contributors'
copyright = '2026, mmact contributors'

extensions = [
    'myst_parser', 'sphinx.ext.autodoc', 'sphinx.ext.napoleon',
    'sphinx.ext.viewcode'
]
source_suffix = {'.md': 'markdown'}
root_doc = 'index'
exclude_patterns = ['_build']
myst_heading_anchors = 4
myst_enable_extensions = ['colon_fence']
# Google-style docstrings (Args:, Returns:, Raises:)
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = 'bysource'
autodoc_typehints = 'description'
# Class docstrings and __init__ arguments; the API page lists the members.
autoclass_content = 'class'
html_theme = 'alabaster'
html_title = 'mmact'


def write_model_zoo(app):
    """``model_zoo.md`` from ``model-index.yml`` and the metafiles, before
    Sphinx reads the sources (``docs/model_zoo.py``)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        'model_zoo.py')
    spec = importlib.util.spec_from_file_location('mmact_docs_model_zoo',
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write()


def setup(app):
    app.connect('builder-inited', write_model_zoo)
