"""Trace replay: the :class:`Trace` workload, its CSV and JSONL parsing and its stream.

A :class:`Trace` replays the timestamps (and optional token counts) of a CSV file or a
JSON Lines file (``path``) or of a named dataset (``dataset``, see
:mod:`batch_env.workload.datasets`), rescaled to a target rate, optionally started at a
random offset, looped by default. Parsed files are cached (:func:`load_trace`) on path,
modification time and columns.

Prefix information (issue 63): a JSONL trace may carry, per request, the hashes of its
prompt's blocks of ``prefix_block_tokens`` tokens (Mooncake's ``hash_ids``, 512-token
blocks: equal ids at the same position are the same prefix). They travel with the
arrivals (:attr:`ArrivalChunk.prefix`) to the LLM server's prefix cache
(:mod:`batch_env.llm.kv_cache`).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import os
import re
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np

from ..checks import positive
from .arrivals import DEFAULT_CHUNK_SIZE, ArrivalChunk, ArrivalStream, Workload

__all__ = ["Trace", "TraceData", "check_llm_tokens", "dataset_path", "load_trace"]


# ----------------------------------------------------------------------------------
# Trace loading
# ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceData:
    """Parsed trace: relative raw times (s) and tokens, all read-only.

    :param times: float64 seconds since the first record (non-decreasing).
    :param prompt_tokens: int64 or None.
    :param output_tokens: int64 or None.
    :param period_s: loop period in raw seconds (span + mean gap).
    :param cv: CV of the gaps over one loop period (including the seam gap).
    :param prefix: per row, the tuple of its prompt's block hashes (object array), or None.
    """

    times: np.ndarray
    prompt_tokens: np.ndarray | None
    output_tokens: np.ndarray | None
    period_s: float
    cv: float
    prefix: np.ndarray | None = None


def check_llm_tokens(
    prompt: np.ndarray, output: np.ndarray, where: str, columns: tuple[str, str]
) -> None:
    """Refuse token counts an LLM request cannot have: a prompt or an output of 0 tokens.

    A request needs a prompt token to prefill and produces its first output token in the
    prefill, so both counts must be >= 1 (nothing is rounded up silently).

    :param prompt: prompt-token counts per row.
    :param output: output-token counts per row.
    :param where: the file, for the message.
    :param columns: the names of the prompt and output columns.
    :raises ValueError: naming the file, the column, the first bad row and its value.
    """
    for name, col in zip(columns, (prompt, output), strict=True):
        bad = np.flatnonzero(col < 1)
        if bad.size:
            k = int(bad[0])
            raise ValueError(
                f"{where}: column {name!r} data row {k + 1}: token count {int(col[k])} is "
                f"invalid for an LLM request: expected an integer >= 1 ({bad.size} such row(s))"
            )


_TZ_RE = re.compile(r"(?<=[T ]\d\d:\d\d)(?::\d\d(?:\.\d+)?)?(Z|[+-]\d\d:?\d\d)$")


def _parse_datetimes(values: list[str]) -> np.ndarray:
    """Parse ISO-like datetimes (space or 'T', up to 9 fractional digits, optional zone).

    :param values: the stripped strings.
    :return: int64 nanoseconds since the epoch (UTC when a zone is given).
    :raises ValueError: if a value does not parse (the caller locates it).
    """
    offsets = np.zeros(len(values), dtype=np.int64)
    cleaned = values
    if any(v.endswith("Z") or "+" in v or v.count("-") > 2 for v in values):
        cleaned = []
        for k, v in enumerate(values):
            mt = _TZ_RE.search(v)
            if mt is None:
                cleaned.append(v)
                continue
            zone = mt.group(1)
            cleaned.append(v[: mt.start(1)])
            if zone != "Z":
                hh, mm = int(zone[1:3]), int(zone[-2:])
                sign = 1 if zone[0] == "+" else -1
                offsets[k] = sign * (hh * 3600 + mm * 60) * 1_000_000_000
    arr = np.array(cleaned, dtype="datetime64[ns]")
    if np.isnat(arr).any():
        raise ValueError("NaT")
    return arr.astype(np.int64) - offsets


def _parse_float(v: str) -> float | None:
    """Return ``float(v)`` or None when it does not parse."""
    try:
        return float(v)
    except ValueError:
        return None


def _parse_dt(v: str) -> int | None:
    """Return nanoseconds of one datetime string, or None when it does not parse."""
    try:
        return int(_parse_datetimes([v])[0])
    except ValueError:
        return None


def _read_csv(path: str, where: str) -> tuple[list[str], list[list[str]], list[int]]:
    """Read the header, the data rows and their line numbers of a trace CSV.

    Leading lines starting with ``#`` and blank lines are skipped; the first other line
    is the header. A path ending in ``.gz`` is read through gzip. Blank data lines are skipped too.

    :param path: file path.
    :param where: the file, for the messages.
    :return: the stripped header, the raw data rows and each row's line number.
    :raises ValueError: if the file cannot be read, is not UTF-8 or CSV, or is empty.
    """
    header: list[str] | None = None
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt", newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            for rec in reader:
                if header is None:
                    if not rec or not "".join(rec).strip() or rec[0].lstrip().startswith("#"):
                        continue
                    header = [h.strip() for h in rec]
                    continue
                if not rec or (len(rec) == 1 and not rec[0].strip()):
                    continue
                rows.append(rec)
                lines.append(reader.line_num)
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{where}: not a UTF-8 text CSV file (byte {e.start}: {e.reason}); expected a CSV "
            "with a header line"
        ) from None
    except (csv.Error, gzip.BadGzipFile, EOFError) as e:
        raise ValueError(f"{where}: not a readable CSV file: {e}") from None
    except OSError as e:
        raise ValueError(f"{where}: cannot read it: {e.strerror or e}") from None
    if header is None:
        raise ValueError(f"{where}: the file is empty (no header, no rows)")
    return header, rows, lines


def _read_jsonl(path: str, where: str) -> tuple[list[str], list[list[str]], list[int], list[dict]]:
    """Read a JSON Lines trace: one JSON object per line (blank lines skipped).

    The columns are the first record's keys; scalar values are given to the column
    parsers as text (``_column``), and the records themselves are returned for the
    list-valued prefix hashes. A path ending in ``.gz`` is read through gzip.

    :return: the header, the rows as text, each row's line number, and the records.
    :raises ValueError: if the file cannot be read, a line is not a JSON object, or the
        file holds no record.
    """
    import json

    records: list[dict] = []
    lines: list[int] = []
    try:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8-sig") as fh:
            for n, text in enumerate(fh, 1):
                if not text.strip():
                    continue
                try:
                    rec = json.loads(text)
                except json.JSONDecodeError as e:
                    raise ValueError(
                        f"{where}: line {n}: not JSON ({e.msg}); expected one JSON object per line"
                    ) from None
                if not isinstance(rec, dict):
                    raise ValueError(
                        f"{where}: line {n}: {text.strip()[:60]!r} is not a JSON object; expected one object per line"
                    )
                records.append(rec)
                lines.append(n)
    except UnicodeDecodeError as e:
        raise ValueError(f"{where}: not a UTF-8 text file (byte {e.start}: {e.reason})") from None
    except (gzip.BadGzipFile, EOFError) as e:
        raise ValueError(f"{where}: not a readable JSONL file: {e}") from None
    except OSError as e:
        raise ValueError(f"{where}: cannot read it: {e.strerror or e}") from None
    if not records:
        raise ValueError(f"{where}: the file holds no record (expected one JSON object per line)")
    header = list(records[0])
    rows = [["" if r.get(h) is None else str(r.get(h)) for h in header] for r in records]
    return header, rows, lines, records


def _prefix_column(
    records: list[dict] | None,
    name: str | None,
    block_tokens: int,
    prompt: np.ndarray | None,
    lines: list[int],
    where: str,
) -> np.ndarray | None:
    """The prefix hashes of each row (an object array of int tuples), or None when the
    trace has no such column (a CSV, or a JSONL file whose first record lacks it).

    :raises ValueError: naming the row and the field: a row without the field, a value
        that is not a list of integers, or more hashes than the row's prompt has blocks of
        ``block_tokens`` (``ceil(prompt / block_tokens)``).
    """
    if records is None or name is None or name not in records[0]:
        return None
    out = np.empty(len(records), dtype=object)
    for k, rec in enumerate(records):
        loc = f"{where}: {_loc(lines, k)}: field {name!r}"
        if name not in rec:
            raise ValueError(
                f"{loc} is missing; every row needs its prompt's block hashes (a list of integers, [] for none)"
            )
        v = rec[name]
        if not isinstance(v, list):
            raise ValueError(f"{loc}={v!r} is invalid: expected a list of integer hashes")
        for i, h in enumerate(v):
            if not isinstance(h, int) or isinstance(h, bool):
                raise ValueError(f"{loc}[{i}]={h!r} is invalid: expected an integer hash")
        if prompt is not None:
            blocks = -(-int(prompt[k]) // block_tokens)
            if len(v) > blocks:
                raise ValueError(
                    f"{loc} has {len(v)} hashes but the prompt's {int(prompt[k])} tokens make "
                    f"{blocks} block(s) of prefix_block_tokens={block_tokens}: expected at most {blocks}"
                )
        out[k] = tuple(v)
    out.setflags(write=False)
    return out


def _column(header: list[str], rows: list[list[str]], name: str) -> list[str]:
    """Return the stripped values of column ``name`` ("" where a row is short)."""
    c = header.index(name)
    return [r[c].strip() if c < len(r) else "" for r in rows]


def _loc(lines: list[int], k: int) -> str:
    """Name data row ``k`` (0-based) and its line in the file, for messages."""
    return f"row {k + 1} (line {lines[k]})"


def _relative_seconds(
    raw: list[str], where: str, ts_col: str, lines: list[int]
) -> tuple[np.ndarray, str]:
    """Parse a timestamp column (plain seconds or datetimes) into seconds since row 1.

    The first value decides the format: a number means seconds, anything else datetimes.

    :param raw: the stripped column values (at least one).
    :param where: the file, for the messages.
    :param ts_col: the column name, for the messages.
    :param lines: each row's line number, for the messages.
    :return: float64 seconds relative to the first row, and ``"seconds"`` or ``"datetimes"``.
    :raises ValueError: naming the first value that does not parse.
    """
    first = raw[0]
    if _parse_float(first) is not None:
        try:
            secs = np.array(raw, dtype=np.float64)
            bad = ~np.isfinite(secs)
        except ValueError:
            secs = np.zeros(len(raw))
            bad = np.array([_parse_float(v) is None for v in raw])
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(
                f"{where}: column {ts_col!r} {_loc(lines, k)}: cannot parse timestamp {raw[k]!r} "
                f"(this column holds seconds, from row 1 {first!r}; expected a finite number)"
            )
        return secs - secs[0], "seconds"
    try:
        ns = _parse_datetimes(raw)
    except ValueError:
        ns = np.zeros(len(raw), dtype=np.int64)
        for k, v in enumerate(raw):
            if _parse_dt(v) is None:
                raise ValueError(
                    f"{where}: column {ts_col!r} {_loc(lines, k)}: cannot parse timestamp {v!r}; "
                    "expected a datetime like '2023-11-16 18:15:46.6805900' (ISO 8601, "
                    "space or 'T', up to 9 fractional digits) or plain seconds"
                ) from None
    return (ns - ns[0]).astype(np.float64) / 1e9, "datetimes"


def _check_times(
    rel: np.ndarray, raw: list[str], fmt: str, where: str, ts_col: str, lines: list[int]
) -> None:
    """Refuse decreasing timestamps, and fewer than two distinct ones.

    :param rel: seconds relative to the first row.
    :param raw: the column values as written, for the messages.
    :param fmt: ``"seconds"`` or ``"datetimes"``, for the messages.
    :param where: the file, for the messages.
    :param ts_col: the column name, for the messages.
    :param lines: each row's line number, for the messages.
    :raises ValueError: naming the first row earlier than its predecessor, or the span.
    """
    dec = np.flatnonzero(np.diff(rel) < 0)
    if dec.size:
        k = int(dec[0]) + 1
        raise ValueError(
            f"{where}: column {ts_col!r} {_loc(lines, k)}: timestamp {raw[k]!r} is earlier than the "
            f"previous row's {raw[k - 1]!r}; timestamps must be non-decreasing"
        )
    n = rel.size
    span = float(rel[-1])
    if n < 2 or span <= 0:
        raise ValueError(
            f"{where}: column {ts_col!r}: the {n} timestamp(s) ({fmt}) span {span!r} s; a trace "
            "needs at least two distinct timestamps to define a rate"
        )


def _token_column(
    header: list[str], rows: list[list[str]], lines: list[int], name: str | None, where: str
) -> np.ndarray | None:
    """Parse a token-count column into read-only int64 (None when absent or not asked for).

    :param header: the file's header.
    :param rows: the data rows.
    :param lines: each row's line number, for the messages.
    :param name: the column name or None.
    :param where: the file, for the messages.
    :return: the counts, or None if ``name`` is None or not in the header.
    :raises ValueError: naming the first value that is not an integer >= 0.
    """
    if name is None or name not in header:
        return None
    vals = _column(header, rows, name)
    try:
        arr = np.array(vals, dtype=np.float64)
    except ValueError:
        arr = np.array([_parse_float(v) if _parse_float(v) is not None else np.nan for v in vals])
    bad = ~np.isfinite(arr) | (arr < 0) | (arr != np.round(arr))
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(
            f"{where}: column {name!r} {_loc(lines, k)}: token count {vals[k]!r} is invalid; "
            "expected an integer >= 0"
        )
    out = arr.astype(np.int64)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=16)
def load_trace(
    path: str,
    mtime_ns: int,
    size: int,
    ts_col: str,
    prompt_col: str | None,
    output_col: str | None,
    prefix_col: str | None = None,
    prefix_block_tokens: int = 512,
    time_unit: str = "s",
) -> TraceData:
    """Read and validate a trace CSV or JSONL file (cached on path, modification time and
    columns).

    CSV: leading lines starting with ``#`` and blank lines are skipped; the first other
    line is the header. JSONL (a path ending in ``.jsonl`` or ``.jsonl.gz``): one JSON
    object per line, whose keys are the columns. A path ending in ``.gz`` is read through
    gzip.

    :param path: file path.
    :param mtime_ns: modification time (cache key only).
    :param size: file size (cache key only).
    :param ts_col: timestamp column.
    :param prompt_col: prompt-token column or None.
    :param output_col: output-token column or None.
    :param prefix_col: the JSONL field of the prompt's block hashes, or None.
    :param prefix_block_tokens: tokens per hashed block.
    :param time_unit: ``"s"`` or ``"ms"``: the unit of numeric timestamps.
    :return: the parsed trace.
    :raises ValueError: on any problem, naming the file, column, row and value.
    """
    where = f"Trace {path!r}"
    records: list[dict] | None = None
    if str(path).endswith((".jsonl", ".jsonl.gz")):
        header, rows, lines, records = _read_jsonl(path, where)
    else:
        header, rows, lines = _read_csv(path, where)
    if ts_col not in header:
        raise ValueError(
            f"{where}: timestamp column timestamp_column={ts_col!r} not found; "
            f"columns found: {header!r}"
        )
    if not rows:
        raise ValueError(f"{where}: the file has a header {header!r} but no data rows")
    raw = _column(header, rows, ts_col)
    rel, fmt = _relative_seconds(raw, where, ts_col, lines)
    if fmt == "seconds" and time_unit == "ms":
        rel = rel / 1000.0
    _check_times(rel, raw, fmt, where, ts_col, lines)
    n = rel.size
    span = float(rel[-1])
    prompt = _token_column(header, rows, lines, prompt_col, where)
    output = _token_column(header, rows, lines, output_col, where)
    prefix = _prefix_column(records, prefix_col, prefix_block_tokens, prompt, lines, where)
    period = span * n / (n - 1)
    gaps = np.append(np.diff(rel), period / n)
    cv = float(np.std(gaps) / np.mean(gaps))
    rel.setflags(write=False)
    return TraceData(rel, prompt, output, period, cv, prefix)


def dataset_path(dataset: Any, path: Any, owner: str) -> str | None:
    """The local file of ``dataset`` (None when no dataset is given); never downloads.

    ``path`` may only be None or that same file (as :func:`dataclasses.replace` passes it).

    :raises ValueError: for an unknown dataset, one not fetched (naming the command that
        fetches it), or a ``path`` given together with the dataset.
    """
    if dataset is None:
        return None
    from . import datasets as data

    if not isinstance(dataset, str):
        raise ValueError(
            f"{owner}: dataset={dataset!r} is invalid; expected a dataset name "
            f"({', '.join(data.DATASETS)})"
        )
    file = str(data.path(dataset))
    if path is not None and (not isinstance(path, (str, os.PathLike)) or os.fspath(path) != file):
        raise ValueError(f"{owner}: give either path={path!r} or dataset={dataset!r}, not both")
    return file


@dataclass(frozen=True)
class Trace(Workload):
    """Replay of a trace of request arrivals (a CSV or a JSON Lines file).

    The timestamp column holds absolute datetimes (``2023-11-16 18:15:46.6805900`` as
    in the Azure LLM inference trace, ISO 8601 with ``T``, up to 9 fractional digits,
    an optional ``Z``/``+hh:mm`` zone) or plain seconds (floats). Times are taken
    relative to the first record, so without ``random_offset`` the first arrival is at
    time 0. Equal timestamps are kept, in file order. Leading ``#`` comment lines are
    skipped. The file is read (and validated) when the workload is created, and cached.

    Looping: the replay repeats with period ``span + mean gap`` (``span`` = last - first
    timestamp, mean gap = ``span / (n - 1)``), so the looped traffic keeps the trace's
    mean rate ``n / period`` and no two arrivals meet at the seam.

    Give exactly one of ``path`` and ``dataset``. A dataset (``"azure-conv-2023"``; see
    :mod:`batch_env.workload.datasets` and ``batch-env data list``) is a shipped excerpt or a file
    fetched before with ``batch-env data fetch NAME``: nothing is downloaded here, and a
    dataset that is not in the cache is a ValueError naming that command. ``path`` then
    holds the dataset's local file, and :meth:`to_dict` gives the dataset without it.

    :param path: CSV file path.
    :param timestamp_column: name of the timestamp column.
    :param prompt_tokens_column: prompt-token column; None, or a name not in the file,
        gives ``prompt_tokens=None`` in the chunks.
    :param output_tokens_column: output-token column; same rules.
    :param rate_scale: speed-up factor (> 0): times are divided by it (2 = twice the
        traffic).
    :param target_rate_per_s: if set (> 0), rescale times so the mean rate is this;
        mutually exclusive with ``rate_scale != 1``.
    :param random_offset: start at a uniformly random position in ``[0, period)`` (drawn
        from the stream's generator) and wrap around.
    :param loop: repeat the trace forever (default). With ``loop=False`` the stream
        replays each record exactly once (from the offset, wrapping once, if
        ``random_offset``) and then returns empty chunks: the env must end the episode
        by its horizon.
    :param dataset: a dataset name of :data:`batch_env.workload.datasets.DATASETS`, instead of ``path``.
    :param time_unit: ``"s"`` (default) or ``"ms"``: the unit of numeric timestamps
        (Mooncake's traces count milliseconds).
    :param prefix_hashes_column: a JSONL trace's field holding each prompt's block hashes
        (a list of integers; Mooncake's ``hash_ids``); None, or a field the file lacks,
        gives arrivals without prefix information.
    :param prefix_block_tokens: tokens per hashed block (Mooncake: 512). The LLM server's
        ``block_size`` must divide it: hash ``h`` at position ``j`` covers its blocks
        ``j * prefix_block_tokens / block_size`` onwards (:mod:`batch_env.llm.kv_cache`).

    A dataset with its own columns (``mooncake-conversation``) sets these fields where the
    trace leaves them at their defaults.
    """

    kind: ClassVar[str] = "trace"
    path: str | None = None
    timestamp_column: str = "TIMESTAMP"
    prompt_tokens_column: str | None = "ContextTokens"
    output_tokens_column: str | None = "GeneratedTokens"
    rate_scale: float = 1.0
    target_rate_per_s: float | None = None
    random_offset: bool = False
    loop: bool = True
    dataset: str | None = None
    time_unit: str = "s"
    prefix_hashes_column: str | None = "hash_ids"
    prefix_block_tokens: int = 512

    def __post_init__(self) -> None:
        """Validate the fields and load the file (raising ValueError on any problem)."""
        p = dataset_path(self.dataset, self.path, "Trace")
        if self.dataset is not None:
            self._dataset_fields()
        if p is None and self.path is None:
            raise ValueError(
                "Trace: give a CSV file (path=...) or a dataset name (dataset=...; "
                "see `batch-env data list`)"
            )
        p = self.path if p is None else p
        if not isinstance(p, (str, os.PathLike)) or not os.fspath(p):
            raise ValueError(f"Trace: path={p!r} is invalid; expected a CSV file path")
        path = os.fspath(p)
        if not isinstance(path, str):
            path = os.fsdecode(path)
        object.__setattr__(self, "path", path)
        for name in ("timestamp_column", "prompt_tokens_column", "output_tokens_column"):
            v = getattr(self, name)
            optional = name != "timestamp_column"
            if not (isinstance(v, str) and v) and not (optional and v is None):
                allowed = "a column name" + (" or None" if optional else "")
                raise ValueError(f"Trace: {name}={v!r} is invalid; expected {allowed}")
        object.__setattr__(self, "rate_scale", positive(self.rate_scale, "rate_scale", "Trace"))
        if self.target_rate_per_s is not None:
            object.__setattr__(
                self,
                "target_rate_per_s",
                positive(self.target_rate_per_s, "target_rate_per_s", "Trace"),
            )
            if self.rate_scale != 1.0:
                raise ValueError(
                    f"Trace: rate_scale={self.rate_scale!r} and target_rate_per_s="
                    f"{self.target_rate_per_s!r} are mutually exclusive; set one of them "
                    "(rate_scale=1 with a target)"
                )
        for name in ("random_offset", "loop"):
            v = getattr(self, name)
            if not isinstance(v, (bool, np.bool_)):
                raise ValueError(f"Trace: {name}={v!r} is invalid; expected True or False")
            object.__setattr__(self, name, bool(v))
        if self.time_unit not in ("s", "ms"):
            raise ValueError(
                f"Trace: time_unit={self.time_unit!r} is invalid; expected 's' or 'ms'"
            )
        v = self.prefix_hashes_column
        if not (v is None or (isinstance(v, str) and v)):
            raise ValueError(
                f"Trace: prefix_hashes_column={v!r} is invalid; expected a field name or None"
            )
        b = self.prefix_block_tokens
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
            raise ValueError(
                f"Trace: prefix_block_tokens={b!r} is invalid; expected an integer >= 1"
            )
        object.__setattr__(self, "prefix_block_tokens", int(b))
        if not os.path.isfile(path):
            raise ValueError(f"Trace: path={path!r}: file not found")
        self.data()

    def data(self) -> TraceData:
        """Return the parsed (cached) trace data.

        :raises ValueError: if the file has disappeared since the workload was created.
        """
        path = cast(str, self.path)  # a str once __post_init__ has run
        try:
            st = os.stat(path)
        except OSError as exc:
            raise ValueError(f"Trace: path={self.path!r}: cannot read the file ({exc})") from None
        return load_trace(
            os.path.abspath(path),
            st.st_mtime_ns,
            st.st_size,
            self.timestamp_column,
            self.prompt_tokens_column,
            self.output_tokens_column,
            self.prefix_hashes_column,
            self.prefix_block_tokens,
            self.time_unit,
        )

    def _dataset_fields(self) -> None:
        """Take the dataset's own trace fields (columns, time unit, prefix hashes) where
        this trace leaves them at their defaults."""
        from . import datasets

        own = dict(datasets.get(self.dataset).trace_fields)
        for f in dataclasses.fields(self):
            if f.name in own and getattr(self, f.name) == f.default:
                object.__setattr__(self, f.name, own[f.name])

    @property
    def has_prefix(self) -> bool:
        """Whether the arrivals carry their prompts' block hashes (prefix information)."""
        return self.data().prefix is not None

    def _scale(self) -> float:
        """Return the factor raw times are divided by."""
        if self.target_rate_per_s is None:
            return self.rate_scale
        d = self.data()
        return self.target_rate_per_s / (d.times.size / d.period_s)

    @property
    def n_records(self) -> int:
        """Number of records (rows) in the trace."""
        return int(self.data().times.size)

    @property
    def period_s(self) -> float:
        """Loop period after rescaling: (span + mean gap) / scale."""
        return self.data().period_s / self._scale()

    @property
    def mean_rate_per_s(self) -> float:
        """Mean rate over one loop period after rescaling: ``n_records / period_s``."""
        return self.n_records / self.period_s

    @property
    def arrival_cv(self) -> float:
        """CV of the replayed gaps over one loop period (the seam gap included)."""
        return self.data().cv

    @property
    def total_arrivals(self) -> int | None:
        """``n_records`` when ``loop=False``, else None (infinite)."""
        return None if self.loop else self.n_records

    def with_mean_rate(self, rate_per_s: float) -> Trace:
        """Return a copy with ``target_rate_per_s = rate_per_s`` (and ``rate_scale = 1``).

        :param rate_per_s: the new mean rate (> 0).
        :return: the rescaled workload.
        """
        rate = positive(rate_per_s, "rate_per_s", "Trace.with_mean_rate")
        return dataclasses.replace(self, rate_scale=1.0, target_rate_per_s=rate)

    def to_dict(self) -> dict[str, Any]:
        """Return all fields with ``"kind": "trace"`` (``path`` None when ``dataset`` is set)."""
        d: dict[str, Any] = {"kind": self.kind}
        d.update({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        if self.dataset is not None:
            d["path"] = None
        return d

    def stream(
        self, rng: np.random.Generator, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> ArrivalStream:
        """Start a replay.

        :param rng: source of the random offset (unused without ``random_offset``).
        :param chunk_size: records per chunk.
        :return: the stream (finite when ``loop=False``).
        """
        n = self._check_stream_args(rng, chunk_size)
        return _TraceStream(self, rng, n)


class _TraceStream(ArrivalStream):
    """Replay of a trace: looped, rescaled, optionally from a random offset."""

    def __init__(self, wl: Trace, rng: np.random.Generator, chunk_size: int) -> None:
        """:param wl: the trace workload. :param rng: generator. :param chunk_size: chunk length."""
        data = wl.data()
        self._t = data.times
        self._prompt = data.prompt_tokens
        self._output = data.output_tokens
        self._prefix = data.prefix
        self._nrec = data.times.size
        self._period = data.period_s
        self._scale = wl._scale()
        self._n = chunk_size
        if wl.random_offset:
            self._offset = float(rng.random()) * self._period
            self._next = int(np.searchsorted(self._t, self._offset, "left"))
        else:
            self._offset = 0.0
            self._next = 0
        self._end = self._next + self._nrec if not wl.loop else None

    def next_chunk(self) -> ArrivalChunk:
        """Return the next ``chunk_size`` records (empty once a non-looping trace ended)."""
        stop = self._next + self._n
        if self._end is not None:
            stop = min(stop, self._end)
        if stop <= self._next:
            self.exhausted = True
            empty = np.empty(0, dtype=np.int64)
            return ArrivalChunk(
                np.empty(0, dtype=np.float64),
                None if self._prompt is None else empty,
                None if self._output is None else empty.copy(),
                prefix=None if self._prefix is None else np.empty(0, dtype=object),
            )
        j = np.arange(self._next, stop, dtype=np.int64)
        loops, i = np.divmod(j, self._nrec)
        times = (self._t[i] + loops * self._period - self._offset) / self._scale
        self._next = stop
        if self._end is not None and stop >= self._end:
            self.exhausted = True
        return ArrivalChunk(
            times,
            None if self._prompt is None else self._prompt[i],
            None if self._output is None else self._output[i],
            prefix=None if self._prefix is None else self._prefix[i],
        )
