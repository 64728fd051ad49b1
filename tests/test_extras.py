"""Every command a tutorial names runs in the extra that the tutorial installs.

The train tutorial (docs/tutorials/train.md) installs ``batch-env[train]`` and runs
rl-zoo3's ``train``, ``enjoy`` and ``plots.plot_train`` and ``agents.zoo``. A fresh venv
holds only what the extra asks for, directly or through its dependencies' requirements;
a module those commands import from a distribution outside that closure fails there
(rl-zoo3 imports ``requests``, which its hub client no longer pulls in: issue 48). The
check reads the installed distributions' metadata, so it needs no download.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: imported only where present (inside a ``try``), so a fresh venv without them works:
#: pandas' optional pyarrow, torch's optional NVML bindings, fsspec's optional lz4 codec
#: (which the ray extra installs for RLlib)
OPTIONAL = {"pyarrow", "nvidia-ml-py", "lz4"}

SCRIPT = r"""
import importlib, importlib.metadata as md, json, sys
from packaging.requirements import Requirement

def norm(n):
    return n.lower().replace("_", "-").replace(".", "-")

def closure(root, extras):
    seen, todo = set(), [(root, frozenset(extras))]
    while todo:
        name, ex = todo.pop()
        if (norm(name), ex) in seen:
            continue
        seen.add((norm(name), ex))
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in reqs:
            req = Requirement(r)
            envs = [{"extra": e} for e in ex] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(e) for e in envs):
                todo.append((req.name, frozenset(req.extras)))
    return {n for n, _ in seen}

declared = closure("batch-env", {"train"})
for m in ("rl_zoo3.train", "rl_zoo3.enjoy", "rl_zoo3.plots.plot_train", "agents.zoo"):
    importlib.import_module(m)
dists = md.packages_distributions()
used = {norm(d) for top in {k.split(".")[0] for k in sys.modules} for d in dists.get(top, [])}
print(json.dumps(sorted(used - declared)))
"""


def test_the_train_extra_holds_what_the_tutorial_commands_import():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    missing = set(json.loads(out.strip().splitlines()[-1])) - {"batch-env"}
    assert missing <= OPTIONAL, (
        f"the tutorial's commands import {sorted(missing - OPTIONAL)}, which batch-env[train] "
        "does not install (add them to pyproject's train extra)"
    )
