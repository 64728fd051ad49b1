"""Write the API reference's pages (``docs/api/``) from the packages, before a build.

One page per module of ``batch_env``, ``baselines``, ``agents`` and ``experiments``
(``automodule`` with every member, documented or not) and an index page per package.
The pages are generated, not kept in git, so a new module is in the reference without
anyone remembering to add it. A public class, function or method without a docstring
is reported as a Sphinx warning, which ``make docs`` (``-W``) turns into an error.
"""

from __future__ import annotations

import inspect
import pkgutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.util import logging

PACKAGES = ("batch_env", "baselines", "agents", "experiments")
LOG = logging.getLogger(__name__)


def modules_of(package: str) -> list[str]:
    """Every importable module of ``package`` (itself first), private ones left out."""
    pkg = __import__(package)
    names = [package]
    for info in pkgutil.walk_packages(pkg.__path__, prefix=package + "."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        names.append(info.name)
    return sorted(names)


def write_pages(out: Path) -> list[str]:
    """Write ``out/index.rst`` and a page per module; return the modules documented."""
    out.mkdir(parents=True, exist_ok=True)
    documented = []
    toc = []
    for package in PACKAGES:
        mods = modules_of(package)
        documented += mods
        toc.append(f"   {package}")
        lines = [package, "=" * len(package), "", ".. toctree::", "   :maxdepth: 1", ""]
        lines += [f"   {m}" for m in mods if m != package]
        lines += ["", f".. automodule:: {package}", "   :ignore-module-all:", ""]
        _write(out / f"{package}.rst", "\n".join(lines))
        for mod in mods:
            if mod == package:
                continue
            title = f"``{mod}``"
            _write(
                out / f"{mod}.rst",
                f"{title}\n{'=' * len(title)}\n\n.. automodule:: {mod}\n   :ignore-module-all:\n",
            )
    index = [
        "API reference",
        "=============",
        "",
        "Generated from the docstrings of every module (``docs/_ext/apigen.py``).",
        "",
        ".. toctree::",
        "   :maxdepth: 2",
        "",
        *toc,
        "",
    ]
    _write(out / "index.rst", "\n".join(index))
    return documented


def _write(path: Path, text: str) -> None:
    # rewrite only on change, so that Sphinx's incremental build stays incremental
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _missing_docstring(app, what, name, obj, skip, options):  # noqa: ANN001 (Sphinx's hook)
    if skip or name.startswith("_"):
        return None
    if not (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj)):
        return None
    where = getattr(obj, "__module__", None) or ""
    if where.split(".")[0] not in PACKAGES:
        return None  # imported from elsewhere: autodoc leaves it out
    if not inspect.getdoc(obj):
        LOG.warning("no docstring: %s.%s (in a %s)", where, name, what, type="apigen")
    return None


def _generate(app: Sphinx) -> None:
    write_pages(Path(app.srcdir) / "api")


def setup(app: Sphinx) -> dict:
    """Sphinx extension entry point."""
    app.connect("builder-inited", _generate)
    app.connect("autodoc-skip-member", _missing_docstring)
    return {"parallel_read_safe": True}
