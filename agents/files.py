"""Files that a resumable run writes and reads back: written atomically, and a damaged one
is named, moved aside and redone instead of stopping every rerun.

Used by training (checkpoints, ``config.yaml``, ``evaluations.json``), the comparison
(its cells) and the sweep (its trials). Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: a reader (or a
    rerun after a kill) sees the old file or the new one, never half of one. The
    temporary file is ``<name>.tmp``, so globs for ``*.json`` and the like never see it."""
    atomic_save(path, lambda tmp: Path(tmp).write_text(text), keep_suffix=False)


def atomic_save(
    path: str | os.PathLike[str], save: Callable[[Path], Any], keep_suffix: bool = True
) -> None:
    """Call ``save(tmp)`` to write a temporary file beside ``path``, then rename it to ``path``.

    :param keep_suffix: the temporary name keeps ``path``'s suffix (``model.zip`` ->
        ``model.tmp.zip``), so that savers which add a missing suffix (SB3's
        ``model.save``) write exactly there; otherwise it is ``<name>.tmp``.
    """
    path = Path(path)
    tmp = path.with_name(f"{path.stem}.tmp{path.suffix}" if keep_suffix else f"{path.name}.tmp")
    try:
        save(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def set_aside(path: str | os.PathLike[str], problem: str, then: str) -> Path:
    """Rename a damaged file (or folder) to ``<name>.corrupt`` (``.corrupt-2``, ... when
    taken) and say so on stderr, naming the file, what is wrong and what happens next.

    :param path: the damaged file.
    :param problem: what is wrong with it (one line).
    :param then: what the caller does instead, e.g. ``"recomputing the cell"``.
    :returns: the new path.
    """
    path = Path(path)
    new = path.with_name(f"{path.name}.corrupt")
    k = 2
    while new.exists():
        new = path.with_name(f"{path.name}.corrupt-{k}")
        k += 1
    os.replace(path, new)
    problem = " ".join(str(problem).split())
    print(
        f"warning: {path} is damaged ({problem}); moved it aside to {new.name}, {then}",
        file=sys.stderr,
        flush=True,
    )
    return new


def read_json(
    path: str | os.PathLike[str], then: str, check: Callable[[Any], None] | None = None
) -> Any | None:
    """The JSON value in ``path``, or None when the file is damaged: unreadable, not JSON,
    or refused by ``check`` (which raises ``ValueError`` saying what is wrong). A damaged
    file is moved aside (:func:`set_aside`, with ``then`` in the warning).

    :raises FileNotFoundError: when ``path`` does not exist.
    """
    path = Path(path)
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
        if check is not None:
            check(value)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        set_aside(path, str(exc) or type(exc).__name__, then)
        return None
    return value


def require_keys(value: Any, keys: tuple[str, ...], what: str) -> None:
    """Raise ``ValueError`` unless ``value`` is a mapping holding every key in ``keys``."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object holding {what}, got {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise ValueError(f"{what} lacks {missing}")
