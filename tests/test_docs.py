"""The documentation: its code runs, its links resolve, the site builds and covers the API.

- Every ```` ```python ```` block of the README and of the hand-written pages under
  ``docs/`` runs, in order, one namespace per page, in a fresh working folder: the
  examples cannot drift from the code. Where a block is followed by a ```` ```console ````
  block without a ``$`` prompt, that is the output the page claims, and the block must
  print exactly it. (Shell sessions are ```` ```console ````; they are
  not run here, the commands they show have tests of their own.)
- Every relative link of the README and of the hand-written pages names a file that
  exists (the site's build checks the pages' links again, with the generated pages).
- ``sphinx-build -W`` builds the site without a warning, and its inventory lists every
  public class and function of the four packages (``docs/_ext/apigen.py`` generates the
  API pages from the modules, so a new module is covered without anyone adding it).
- The README stays short: under 200 lines.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
#: a python block followed (after blank lines only) by a console block without a prompt:
#: the output the block prints, which the test compares
_BLOCK_AND_OUTPUT = re.compile(
    r"^```python\n(.*?)^```\n(?:\s*\n)*(?:```console\n(.*?)^```)?", re.S | re.M
)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
#: pages whose snippets train or measure for a few seconds: left out of `make test-fast`
_SLOW_PAGES = {"docs/tutorials/train.md", "docs/tutorials/gpu-profile.md", "docs/real.md"}


def hand_written_pages() -> list[Path]:
    """README.md and the Markdown under docs/ that is not generated (docs/_build, docs/api,
    docs/tasks, docs/cli.md and the env pages docs/envs/*.md are written by the build)."""
    pages = [ROOT / "README.md"]
    for p in sorted(DOCS.rglob("*.md")):
        rel = p.relative_to(DOCS)
        if rel.parts[0] in ("_build", "api", "tasks", "cli.md"):
            continue
        if rel.parts[0] == "envs" and len(rel.parts) == 2:
            continue
        pages.append(p)
    return pages


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


#: pages whose snippets a test of their own runs (with the checks of that feature), so
#: that they do not start a second Ray instance here
_RUN_BY_THEIR_TEST = {"docs/rllib.md": "tests/test_rllib.py"}
PAGES_WITH_CODE = [
    p
    for p in hand_written_pages()
    if _BLOCK.search(p.read_text()) and _rel(p) not in _RUN_BY_THEIR_TEST
]


def test_the_pages_with_code_are_found():
    names = {_rel(p) for p in PAGES_WITH_CODE}
    assert {"README.md", "docs/tutorials/policy.md", "docs/tutorials/train.md"} <= names


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(p, id=_rel(p), marks=[pytest.mark.slow] if _rel(p) in _SLOW_PAGES else [])
        for p in PAGES_WITH_CODE
    ],
)
def test_snippets_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    blocks = _BLOCK_AND_OUTPUT.findall(page.read_text())
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for i, (code, shown) in enumerate(blocks):
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"{_rel(page)} [python block {i + 1}]", "exec"), namespace)
        except Exception as err:  # name the page and block, keep the traceback
            raise AssertionError(f"{_rel(page)}, python block {i + 1} failed: {err!r}") from err
        if shown and not any(line.startswith("$") for line in shown.splitlines()):
            # the output the page shows is what the block prints
            got = [line.rstrip() for line in out.getvalue().strip().splitlines()]
            assert got == [line.rstrip() for line in shown.strip().splitlines()], (
                f"{_rel(page)}, python block {i + 1} prints something else than the page shows"
            )


def _generated_pages() -> set[Path]:
    """The pages the build writes from the code (docs/_ext/envpages.py): they exist only
    after a build, and a link to them is good."""
    import batch_env
    from batch_env import tasks

    names = ["envs/index.md", "tasks/index.md", "cli.md"]
    names += [f"envs/{e.split('/')[1]}.md" for e in batch_env.ENV_IDS]
    names += [f"tasks/{t.split('/')[1]}.md" for t in tasks.TASKS]
    return {(DOCS / n).resolve() for n in names}


@pytest.mark.parametrize("page", hand_written_pages(), ids=_rel)
def test_relative_links_resolve(page: Path):
    text = page.read_text()
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # not inside code
    missing = []
    for target in _LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path = target.split("#", 1)[0]
        found = (page.parent / path).resolve()
        if not found.exists() and found not in _generated_pages():
            missing.append(target)
    assert not missing, f"{_rel(page)} links to files that do not exist: {missing}"


def test_readme_is_short_and_links_into_the_docs():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    for section in ("docs/getting-started.md", "docs/tutorials/train.md", "docs/design.md"):
        assert f"]({section})" in text


def _public_objects() -> set[str]:
    """``module.name`` of every public class and function defined in a documented module."""
    import apigen

    names = set()
    for package in apigen.PACKAGES:
        for mod_name in apigen.modules_of(package):
            mod = __import__(mod_name, fromlist=["_"])
            for name, obj in vars(mod).items():
                if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                    continue
                if getattr(obj, "__module__", None) == mod_name:
                    names.add(f"{mod_name}.{name}")
    return names


@pytest.mark.slow
def test_docs_build_without_warnings_and_list_every_public_object(tmp_path: Path):
    """The site as ``make docs`` builds it, with warnings as errors, every public object in
    the API reference, but for what only the reader's copy needs: ``sphinx.ext.viewcode``'s
    highlighted source pages (a third of the pages) and the theme's page templates. The
    build is Sphinx's JSON builder, the HTML builder's subclass: the same reading,
    cross-references and HTML of each page's body, the same inventory, without furo's
    navigation tree, computed again for every page (a third of the build's time:
    67 s against 47 s on this project's VM)."""
    out = tmp_path / "json"
    conf = (DOCS / "conf.py").read_text()
    assert '"sphinx.ext.viewcode",\n' in conf
    block = conf.split("extensions = [", 1)[1].split("]", 1)[0]
    extensions = [e.strip().strip('"') for e in block.split(",") if e.strip()]
    assert "sphinx.ext.autodoc" in extensions and "apigen" in extensions
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-D",
            "extensions=" + ",".join(e for e in extensions if e != "sphinx.ext.viewcode"),
            "-b",
            "json",
            "-d",
            str(tmp_path / "doctrees"),
            str(DOCS),
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, f"sphinx-build -W failed:\n{proc.stderr[-5000:]}"
    assert not (out / "_modules").exists()  # the override took
    from sphinx.util.inventory import InventoryFile

    with open(out / "objects.inv", "rb") as f:
        inv = InventoryFile.load(f, "", lambda base, uri: uri)
    listed = {
        name for kind in ("py:class", "py:function", "py:exception") for name in inv.get(kind, {})
    }
    public = _public_objects()
    assert len(public) > 300
    missing = sorted(public - listed)
    assert not missing, f"public objects missing from the API reference: {missing[:20]}"
    # the generated pages: one per env and per task, each with its spaces and frame
    import batch_env
    from batch_env import tasks

    for env_id in batch_env.ENV_IDS:
        page = json.loads((out / "envs" / f"{env_id.split('/')[1]}.fjson").read_text())["body"]
        assert "Action space" in page and "<img" in page
    for task_id in tasks.TASKS:
        page = json.loads((out / "tasks" / f"{task_id.split('/')[1]}.fjson").read_text())["body"]
        assert "Reference figures" in page or "Fixed arguments" in page
        assert "<img" in page
