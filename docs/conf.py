"""Sphinx configuration of batch-env's documentation site (``make docs``).

The site is built from the repository alone: the Markdown pages in ``docs/`` (MyST), the
results under ``results/`` and an API reference generated from the docstrings of every
module of the four packages (``docs/_ext/apigen.py`` writes ``docs/api/*.rst`` before
the build reads them). ``make docs`` builds with warnings as errors (``-W``), and a
public class or function without a docstring is a warning (``docs/_ext/apigen.py``).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from sphinx.deprecation import RemovedInSphinx10Warning

# sphinx-autodoc-typehints 3.6 calls an API that Sphinx 9 deprecates, once per docstring:
# Python's warning, not Sphinx's, and nothing this project can change
warnings.filterwarnings(
    "ignore", category=RemovedInSphinx10Warning, module="sphinx_autodoc_typehints"
)

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

project = "batch-env"
author = "batch-env developers"
copyright = "2026, batch-env developers"  # noqa: A001 (Sphinx's name)
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx_autodoc_typehints",
    "sphinx.ext.viewcode",
    "apigen",
    "envpages",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
# envs/usage/ holds the hand-written usage sections that docs/_ext/envpages.py puts into
# the generated env pages; they are not pages of their own
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "envs/usage"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4

html_theme = "furo"
html_title = "batch-env"
# Documented objects stay out of the table of contents (on by default since Sphinx 5.2):
# furo copies the whole toctree for every page's navigation, and with every class and
# function of the 122 API pages in it that copy took 69 of a build's 101 s (measured
# 2026-12-06; 77 s a build without them). The objects are still in the index and search.
toc_object_entries = False

autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
typehints_fully_qualified = False
always_document_param_types = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Attributes:" sections as fields of the class, not a second description of each attribute
napoleon_use_ivar = True
nitpicky = False
