"""The one store of every experiment: keyed records, written atomically, with one damage
policy.

What an experiment computes and a rerun must not compute again (the comparison's cells,
the benchmark's protocol episodes, the agents experiment's evaluations, the LLM
experiment's cells, the sweep's trial scores) is a record under a key. A :class:`Store`
keeps them in one of two layouts:

* a folder, one JSON file per key (``<folder>/<key>.json``), each written through a
  temporary file and a rename (:func:`agents.files.atomic_write_text`): a killed run
  leaves the old file or the new one, never half of one;
* a JSON-lines log (``log=True``), one line per key (``{"key": ..., **record}``),
  appended and flushed as each record ends, for the many small records of a long run
  (the benchmark's episodes): a killed run can only cut its last line.

**The damage policy** is the same in both: a record that is not whole (not JSON, or
refused by the caller's ``check``) is named on stderr, set aside and recomputed. A file
is moved to ``<name>.corrupt`` (:func:`agents.files.set_aside`); a log's damaged line is
copied to ``<log>.corrupt`` and left where it is (the log is append-only: its other
lines stay valid, and a damaged line is never read back as a record; one already in
``<log>.corrupt`` is skipped without a word, so a line is named and set aside once). A record under another
key (a stale one: the code, config or model changed) is not damage: it is simply not
the record asked for, and is recomputed and replaced without a word.

Training runs keep their own files (checkpoints, ``config.yaml``), with the same policy
through :mod:`agents.files`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.files import atomic_write_text, read_json

Check = Callable[[Any], None]


def digest(*parts: Any, length: int = 16) -> str:
    """A short hex SHA-256 of ``parts`` (bytes as they are, anything else as canonical
    JSON): the part of a key that says what a record depends on."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else json.dumps(p, sort_keys=True).encode())
    return h.hexdigest()[:length]


class Store:
    """Keyed records in a folder of JSON files, or in a JSON-lines log (``log=True``).

    :param where: the folder (created on the first write), or the log file.
    :param log: one line per record in the file ``where`` instead of one file per key.
    :param then: what happens to a damaged record, for the warning (``"recomputing the
        cell"``).
    """

    def __init__(self, where: str | os.PathLike[str], log: bool = False, then: str = "") -> None:
        self.where = Path(where)
        self.log = log
        self.then = then or "recomputing it"
        self._lines: dict[str, dict[str, Any]] | None = None

    def path(self, key: str) -> Path:
        """The file of ``key`` (folder layout) or the log."""
        return self.where if self.log else self.where / f"{key}.json"

    def get(self, key: str, check: Check | None = None) -> Any | None:
        """The record under ``key``, or None when there is none or it is damaged (then
        named, set aside: see the module's damage policy)."""
        if self.log:
            return self._read_log(check).get(key)
        path = self.path(key)
        return read_json(path, self.then, check) if path.exists() else None

    def put(self, key: str, record: Any) -> None:
        """Keep ``record`` under ``key``, atomically (a file) or as one flushed line (a log)."""
        if not self.log:
            self.where.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path(key), json.dumps(record))
            return
        if not isinstance(record, dict):
            raise TypeError(f"a log record must be a mapping, got {type(record).__name__}")
        self.where.parent.mkdir(parents=True, exist_ok=True)
        data = self.where.read_bytes() if self.where.exists() else b""
        with self.where.open("a") as f:
            if data and not data.endswith(b"\n"):  # a line cut by a kill: end it
                f.write("\n")
            f.write(json.dumps({"key": key, **record}) + "\n")
            f.flush()
        if self._lines is not None:
            self._lines[key] = record

    def cached(self, key: str, compute: Callable[[], Any], check: Check | None = None) -> Any:
        """The record under ``key``, computed (and kept) when there is none."""
        record = self.get(key, check)
        if record is None:
            record = compute()
            self.put(key, record)
        return record

    def cached_for(self, name: str, version: str, compute: Callable[[], Any]) -> Any:
        """The record ``name`` when it was computed for ``version`` (a digest of what it
        depends on), else ``compute()``, kept in its place: one file per thing evaluated
        (a run's ``check.json``), which a new model or config replaces. A record of
        another version is stale, not damaged: replaced without a word."""
        stored = self.get(name, _versioned)
        if stored is not None and stored["key"] == version:
            return stored["result"]
        result = compute()
        self.put(name, {"key": version, "result": result})
        return result

    def clear(self) -> None:
        """Forget every record (a fresh run that must not read an older code's records)."""
        self._lines = None
        if self.log:
            self.where.unlink(missing_ok=True)
        elif self.where.is_dir():
            for p in self.where.glob("*.json"):
                p.unlink()

    def _read_log(self, check: Check | None) -> dict[str, dict[str, Any]]:
        if self._lines is not None:
            return self._lines
        self._lines = {}
        if not self.where.exists():
            return self._lines
        damaged = []
        for n, line in enumerate(self.where.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict) or "key" not in rec:
                    raise ValueError("not a keyed record")
                key = rec.pop("key")
                if check is not None:
                    check(rec)
            except (ValueError, KeyError, TypeError) as exc:
                damaged.append((n, line, str(exc) or type(exc).__name__))
                continue
            self._lines[key] = rec
        aside = self.where.with_name(self.where.name + ".corrupt")
        known = set(aside.read_text().splitlines()) if aside.exists() else set()
        damaged = [d for d in damaged if d[1] not in known]  # set aside once, named once
        if damaged:
            with aside.open("a") as f:
                f.writelines(line + "\n" for _, line, _ in damaged)
            n, _, problem = damaged[0]
            more = f" and {len(damaged) - 1} more" if len(damaged) > 1 else ""
            print(
                f"warning: {self.where} line {n}{more} is damaged ({' '.join(problem.split())}); "
                f"copied it aside to {aside.name}, {self.then}",
                file=sys.stderr,
                flush=True,
            )
        return self._lines


def _versioned(value: Any) -> None:
    if not isinstance(value, dict) or "key" not in value or "result" not in value:
        raise ValueError("not a keyed result ({'key': ..., 'result': ...})")
