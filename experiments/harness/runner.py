"""Keyed work items run through the store on a backend, resumably.

An experiment hands :func:`run_keyed` its work items (the comparison's cells), a key per
item (a file name that hashes everything the item depends on), the function that
computes an item and a :class:`~experiments.harness.store.Store`. Items already in the
store are read back (a damaged one is named, set aside and recomputed, the store's
policy); the others run on the backend (:mod:`experiments.harness.backends`), each
written to the store as soon as it finishes, so an interrupted run loses no finished
item and a rerun recomputes none. An item that raises is listed as failed (not stored,
so a rerun tries it again) and the others go on; :func:`write_failures` keeps the list
in ``failed.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .backends import check_backend, ray_session, require_ray, run_tasks
from .store import Check, Store

T = TypeVar("T")


def check_backend_options(backend: str, address: str | None, num_cpus: int | None) -> None:
    """Refuse an unknown backend, an address or ``num_cpus`` without Ray, and Ray when it is
    not installed, before anything is read or written."""
    check_backend(backend, address)
    if backend != "ray" and num_cpus is not None:
        raise ValueError(f"num_cpus={num_cpus!r} needs backend='ray' (--backend ray)")
    if backend == "ray":
        require_ray()


def progress_bar(total: int, desc: str, unit: str = "cell") -> Any:
    """A tqdm progress bar, or None on a core install without tqdm."""
    try:
        from tqdm import tqdm
    except ImportError:  # core install: no progress bar
        return None
    return tqdm(total=total, desc=desc, unit=unit)


def run_keyed(
    items: Sequence[T],
    key: Callable[[T], str],
    run: Callable[[T], Any],
    store: Store,
    describe: Callable[[T], dict[str, Any]],
    check: Callable[[T], Check] | None = None,
    bar: Any = None,
    on_item: Callable[[T, bool], None] | None = None,
    backend: str = "local",
    address: str | None = None,
    max_retries: int = 3,
    num_cpus: int | None = None,
) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    """Read back or compute every item; return ``(records by key, how many were reused,
    the failed items)``.

    :param key: an item's key in the store.
    :param run: computes an item's record (the same function on every backend).
    :param describe: what a failure entry says of its item (besides ``key``, ``error``
        and ``traceback``).
    :param check: an item's check of a record read back (raises ``ValueError`` saying
        what is wrong): a record that is not whole is damaged.
    :param bar: a progress bar (``update(1)`` per item, reused ones included).
    :param on_item: called with ``(item, computed)`` after each finished item (not the
        failed ones).
    :param backend: ``"local"`` or ``"ray"`` (with ``address``, ``max_retries`` and
        ``num_cpus``, see :func:`experiments.harness.backends.run_tasks`).
    """
    by_key, todo = _read_back(items, key, store, check, bar, on_item)
    reused = len(by_key)
    failed: list[dict[str, Any]] = []

    def finish(outcome: Any) -> None:
        item = todo[outcome.index]
        if outcome.ok:
            store.put(key(item), outcome.value)
            by_key[key(item)] = outcome.value
        else:
            failed.append(
                {
                    "key": key(item),
                    **describe(item),
                    "error": outcome.error,
                    "traceback": outcome.traceback,
                }
            )
        if bar is not None:
            bar.update(1)
        if outcome.ok and on_item is not None:
            on_item(item, True)

    def execute() -> None:
        with run_tasks(run, todo, backend, max_retries=max_retries) as stream:
            try:
                for outcome in stream:
                    finish(outcome)
            except BaseException:  # interrupted: keep every item that has already finished
                for outcome in stream.drain():
                    if outcome.ok:
                        store.put(key(todo[outcome.index]), outcome.value)
                raise

    if todo and backend == "ray":
        with ray_session(address, num_cpus):
            execute()
    elif todo:
        execute()
    order = {key(item): i for i, item in enumerate(items)}
    failed.sort(key=lambda f: order[f["key"]])
    return by_key, reused, failed


def _read_back(
    items: Sequence[T],
    key: Callable[[T], str],
    store: Store,
    check: Callable[[T], Check] | None,
    bar: Any,
    on_item: Callable[[T, bool], None] | None,
) -> tuple[dict[str, Any], list[T]]:
    """Split the items into those already in the store (read back, keyed; each counted
    on the bar and passed to ``on_item`` as not computed) and those still to run."""
    by_key: dict[str, Any] = {}
    todo: list[T] = []
    for item in items:
        record = store.get(key(item), None if check is None else check(item))
        if record is not None:
            by_key[key(item)] = record
            if bar is not None:
                bar.update(1)
            if on_item is not None:
                on_item(item, False)
        else:
            todo.append(item)
    return by_key, todo


def write_failures(out: Path, failed: list[dict[str, Any]]) -> None:
    """``failed.json``: the items that failed in the latest run (removed when none did)."""
    path = out / "failed.json"
    if failed:
        path.write_text(json.dumps(failed, indent=1) + "\n")
    elif path.exists():
        path.unlink()
