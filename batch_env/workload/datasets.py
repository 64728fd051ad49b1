"""Named public datasets: a registry, a download cache and the shipped trace excerpts.

The environments replay request traces given either as a file (``{"kind": "trace",
"path": "my.csv"}``) or as a dataset of this registry (``{"kind": "trace", "dataset":
"azure-conv-2023"}``). Two kinds of datasets exist:

* *shipped*: files that come with the package (``batch_env/workload/excerpts/``), usable
  without a network: ``azure-conv-2023-excerpt`` and ``azure-code-2023-excerpt``, the
  first 2,000 requests of each Azure 2023 trace, and ``azure-conv-2023-gz`` and
  ``azure-code-2023-gz``, the whole conversation and coding traces gzip-compressed
  (180 kB and 76 kB; the benchmark's Trace task and the chunked-prefill comparison need
  them);
* *downloaded*: the full public traces, fetched on demand with ``batch-env data fetch
  NAME`` (or :func:`fetch`) into a cache folder, and checked against their SHA-256 where
  one is known. Nothing is ever downloaded implicitly: using a dataset that is not in the
  cache is an error naming the command to run.

Downloads need the optional dependency pooch (``pip install 'batch-env[data]'``).

Cache folder: ``$BATCH_ENV_DATA_DIR`` if set, else the user's cache folder
(``pooch.os_cache("batch-env")``: ``~/.cache/batch-env`` on Linux,
``~/Library/Caches/batch-env`` on macOS, ``%LOCALAPPDATA%\\batch-env\\batch-env\\Cache``
on Windows).

Checksums (docs/data.md, "Checksums"): a dataset with a known SHA-256 is refused when the
download does not match (the partial file is removed). For a dataset without one (the
2024 week-long traces: their publisher gives no checksum and the files are not in a
versioned repository), ``fetch`` computes the SHA-256, reports it and records it next to
the file (``<file>.sha256``); a later fetch of that dataset must match the recorded value
(delete the ``.sha256`` file to accept a changed upstream file), and ``sha256=...`` (CLI
``--sha256``) makes a download match a value the user knows.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote, urlparse

__all__ = [
    "DATASETS",
    "Dataset",
    "DatasetError",
    "data_dir",
    "fetch",
    "get",
    "is_available",
    "path",
    "print_list",
    "sha256_of",
]

#: Environment variable that overrides the cache folder of downloaded datasets.
DATA_DIR_ENV = "BATCH_ENV_DATA_DIR"

#: The command that installs the optional download dependency.
INSTALL_HINT = "pip install 'batch-env[data]'"

#: Where the shipped excerpts live (package data).
SHIPPED_DIR = Path(__file__).resolve().parent / "excerpts"

#: Azure/AzurePublicDataset commit that added the 2023 LLM traces (unchanged since; the
#: URLs are pinned to it so that the files cannot change under the known checksums).
AZURE_2023_COMMIT = "790921015d50dd6aae7f7e47f39ba0e235ad6b08"
_AZURE_RAW = f"https://raw.githubusercontent.com/Azure/AzurePublicDataset/{AZURE_2023_COMMIT}/data"
_AZURE_BLOB = "https://azurepublicdatasettraces.blob.core.windows.net/azurellminfererencetrace"

_CITE_2023 = (
    'Patel et al., "Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024'
)
_CITE_MOONCAKE = (
    'Qin et al., "Mooncake: Trading More Storage for Less Computation -- A KVCache-centric '
    'Architecture for Serving LLM Chatbot", FAST 2025'
)
#: kvcache-ai/Mooncake's FAST'25 traces: timestamps in ms, token counts, and the hash of
#: each 512-token block of the prompt (equal ids at the same position: the same prefix)
_MOONCAKE_FIELDS = (
    ("timestamp_column", "timestamp"),
    ("time_unit", "ms"),
    ("prompt_tokens_column", "input_length"),
    ("output_tokens_column", "output_length"),
    ("prefix_hashes_column", "hash_ids"),
    ("prefix_block_tokens", 512),
)
_MOONCAKE_SRC = "kvcache-ai/Mooncake FAST25-release/traces"
_CITE_2024 = (
    'Stojkovic et al., "DynamoLLM: Designing LLM Inference Clusters for Performance and '
    'Energy Efficiency", HPCA 2025'
)


class DatasetError(ValueError):
    """A dataset cannot be used or fetched: unknown name, not downloaded, no pooch,
    checksum mismatch or network failure. The message is one line and says what to do."""


@dataclass(frozen=True)
class Dataset:
    """One registry entry.

    :param name: the registry name (``azure-conv-2023``).
    :param filename: the file's name (in the cache, or in ``batch_env/workload/excerpts``).
    :param description: what the file holds, one line.
    :param source: where it comes from (repository and path, or publisher).
    :param license: the license of the data.
    :param citation: what to cite when using it.
    :param url: download URL (None for shipped datasets).
    :param sha256: the file's SHA-256 when known (hex), else None.
    :param shipped: True when the file comes with the package (no download).
    :param rows: number of records (requests), when known.
    :param size_bytes: file size, when known.
    :param trace_fields: the :class:`~batch_env.workload.Trace` fields that read the file
        (columns, time unit, prefix hashes) where they differ from the Azure traces'; a
        trace of this dataset takes them unless it sets them itself.
    """

    name: str
    filename: str
    description: str
    source: str
    license: str
    citation: str
    url: str | None = None
    sha256: str | None = None
    shipped: bool = False
    rows: int | None = None
    size_bytes: int | None = None
    trace_fields: tuple[tuple[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """All fields, for ``batch-env data list --json``."""
        d = dict(self.__dict__)
        d["trace_fields"] = dict(self.trace_fields)
        return d


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(
            name="azure-conv-2023",
            filename="AzureLLMInferenceTrace_conv.csv",
            description="Azure LLM inference trace, conversation service, Nov 16 2023: 19,366 "
            "requests over ~1 h (TIMESTAMP, ContextTokens, GeneratedTokens)",
            source=f"Azure/AzurePublicDataset data/AzureLLMInferenceTrace_conv.csv @{AZURE_2023_COMMIT[:7]}",
            license="CC-BY-4.0",
            citation=_CITE_2023,
            url=f"{_AZURE_RAW}/AzureLLMInferenceTrace_conv.csv",
            sha256="2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
            rows=19_366,
            size_bytes=719_188,
        ),
        Dataset(
            name="azure-code-2023",
            filename="AzureLLMInferenceTrace_code.csv",
            description="Azure LLM inference trace, coding service, Nov 16 2023: 8,819 "
            "requests over ~57 min (same columns; bursty)",
            source=f"Azure/AzurePublicDataset data/AzureLLMInferenceTrace_code.csv @{AZURE_2023_COMMIT[:7]}",
            license="CC-BY-4.0",
            citation=_CITE_2023,
            url=f"{_AZURE_RAW}/AzureLLMInferenceTrace_code.csv",
            sha256="54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
            rows=8_819,
            size_bytes=320_117,
        ),
        Dataset(
            name="azure-conv-2024",
            filename="AzureLLMInferenceTrace_conv_1week.csv",
            description="Azure LLM inference trace, conversation service, one week of May "
            "2024 (same columns); no published checksum",
            source="Azure/AzurePublicDataset AzureLLMInferenceDataset2024.md (Azure blob storage)",
            license="CC-BY-4.0",
            citation=_CITE_2024,
            url=f"{_AZURE_BLOB}/AzureLLMInferenceTrace_conv_1week.csv",
        ),
        Dataset(
            name="azure-code-2024",
            filename="AzureLLMInferenceTrace_code_1week.csv",
            description="Azure LLM inference trace, coding service, one week of May 2024 "
            "(same columns); no published checksum",
            source="Azure/AzurePublicDataset AzureLLMInferenceDataset2024.md (Azure blob storage)",
            license="CC-BY-4.0",
            citation=_CITE_2024,
            url=f"{_AZURE_BLOB}/AzureLLMInferenceTrace_code_1week.csv",
        ),
        Dataset(
            name="azure-conv-2023-excerpt",
            filename="azure_llm_2023_conv_excerpt.csv",
            description="the first 2,000 requests (~7 min) of azure-conv-2023, shipped "
            "with the package",
            source="head -n 2001 of azure-conv-2023 (header + 2,000 records, bytes unchanged)",
            license="CC-BY-4.0",
            citation=_CITE_2023,
            sha256="67e66e281943344644b374e8e23d76964adb70bc13eb7c2fc021edd65cafc0b6",
            shipped=True,
            rows=2_000,
            size_bytes=74_611,
        ),
        Dataset(
            name="azure-conv-2023-gz",
            filename="azure_llm_2023_conv.csv.gz",
            description="all 19,366 requests of azure-conv-2023, gzip-compressed and "
            "shipped with the package (the benchmark's Trace task replays it)",
            source="gzip -9 -n of azure-conv-2023 (decompresses to the upstream bytes, "
            "SHA-256 2f1e5b66...0bf8)",
            license="CC-BY-4.0",
            citation=_CITE_2023,
            sha256="9d3518f77e4387c32c76b206d8006fe5a2bde0dc41d6038dbd0a1c60c7e86fa2",
            shipped=True,
            rows=19_366,
            size_bytes=180_355,
        ),
        Dataset(
            name="azure-code-2023-gz",
            filename="azure_llm_2023_code.csv.gz",
            description="all 8,819 requests of azure-code-2023, gzip-compressed and "
            "shipped with the package (bursty, long prompts: the chunked-prefill comparison "
            "of batch-env llm replays it)",
            source="gzip -9 -n of azure-code-2023 (decompresses to the upstream bytes, "
            "SHA-256 54e9a6d2...7fb6)",
            license="CC-BY-4.0",
            citation=_CITE_2023,
            sha256="a693e93b69f7c2ad7039d2ea1e109b5cf83c5a6c699e1d4848030e8fae223389",
            shipped=True,
            rows=8_819,
            size_bytes=76_067,
        ),
        Dataset(
            name="mooncake-conversation",
            filename="mooncake_conversation_trace.jsonl.gz",
            description="Kimi's online conversation service (Mooncake, FAST 2025): 12,031 "
            "requests over 59 min, prompts of 12,035 tokens on average, with the hashes of "
            "each prompt's 512-token blocks (prefix caching); gzip-compressed, shipped",
            source=f"{_MOONCAKE_SRC}/conversation_trace.jsonl (gzip -9 -n; decompresses to "
            "the upstream bytes, SHA-256 b8cbb061...b9df)",
            license="Apache-2.0",
            citation=_CITE_MOONCAKE,
            sha256="cbae1655f679723e13e66e016606208ac03590d5b470d82cc4306a249288ea8a",
            shipped=True,
            rows=12_031,
            size_bytes=788_651,
            trace_fields=_MOONCAKE_FIELDS,
        ),
        Dataset(
            name="mooncake-synthetic",
            filename="mooncake_synthetic_trace.jsonl.gz",
            description="Mooncake's synthetic trace from public datasets: 3,993 requests, "
            "Poisson arrivals (3.9 req/s), multi-turn order kept, prompts of 15,325 tokens on "
            "average, with prefix hashes; gzip-compressed, shipped",
            source=f"{_MOONCAKE_SRC}/synthetic_trace.jsonl (gzip -9 -n; decompresses to the "
            "upstream bytes, SHA-256 bd070915...c131)",
            license="Apache-2.0",
            citation=_CITE_MOONCAKE,
            sha256="e43beb47ac9d36c2e7b1254e3309dd3c39cebc26c8ef340612070bf0298bacb8",
            shipped=True,
            rows=3_993,
            size_bytes=294_839,
            trace_fields=_MOONCAKE_FIELDS,
        ),
        Dataset(
            name="azure-code-2023-excerpt",
            filename="azure_llm_2023_code_excerpt.csv",
            description="the first 2,000 requests (~14 min) of azure-code-2023, shipped "
            "with the package",
            source="head -n 2001 of azure-code-2023 (header + 2,000 records, bytes unchanged)",
            license="CC-BY-4.0",
            citation=_CITE_2023,
            sha256="5a893a1a2aac2991caf55d5690df433b29aae910bce5337b667cc0d285550ca3",
            shipped=True,
            rows=2_000,
            size_bytes=72_577,
        ),
    )
}


def get(name: Any) -> Dataset:
    """The registry entry ``name``.

    :raises DatasetError: for an unknown name, listing the known ones.
    """
    if not isinstance(name, str) or name not in DATASETS:
        raise DatasetError(f"dataset {name!r} is unknown; known datasets: {', '.join(DATASETS)}")
    return DATASETS[name]


def data_dir() -> Path:
    """The cache folder of downloaded datasets (``$BATCH_ENV_DATA_DIR`` or the user's cache)."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    try:
        import pooch
    except ImportError:
        pass
    else:
        return Path(pooch.os_cache("batch-env")).expanduser()
    try:  # pooch's own rule (it uses platformdirs), so the folder is the same without pooch
        import platformdirs
    except ImportError:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return Path(base) / "batch-env"
    return Path(platformdirs.user_cache_dir("batch-env"))


def _cached(d: Dataset) -> Path:
    return SHIPPED_DIR / d.filename if d.shipped else data_dir() / d.filename


def is_available(name: str) -> bool:
    """True when the dataset's file is here (shipped, or already fetched); never downloads."""
    return _cached(get(name)).is_file()


def fetch_command(name: str) -> str:
    """The shell command that downloads ``name``."""
    return f"batch-env data fetch {name}"


def path(name: str) -> Path:
    """The local file of dataset ``name``; never downloads.

    :raises DatasetError: for an unknown name, or a downloadable dataset that is not in
        the cache (the message names the command that fetches it).
    """
    d = get(name)
    p = _cached(d)
    if p.is_file():
        return p
    if d.shipped:  # a broken installation
        raise DatasetError(
            f"dataset {name!r}: the shipped file {p} is missing; reinstall batch-env"
        )
    excerpt = f"{name}-excerpt"
    alt = f", or use the shipped excerpt {excerpt!r}" if excerpt in DATASETS else ""
    raise DatasetError(
        f"dataset {name!r} is not downloaded (looked for {p}): run `{fetch_command(name)}` "
        f"(needs {INSTALL_HINT}; set {DATA_DIR_ENV} to use another folder){alt}"
    )


def sha256_of(file: str | os.PathLike[str]) -> str:
    """The SHA-256 (hex) of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(file, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_sha256(name: str, sha256: str | None) -> str | None:
    """``sha256`` normalised (lower-case hex), checked against the registry's value if any.

    :raises DatasetError: when it is not 64 hex digits, or differs from the registry's.
    """
    if sha256 is None:
        return None
    d = get(name)
    value = str(sha256).strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise DatasetError(f"sha256={sha256!r} is invalid: expected 64 hexadecimal digits")
    if d.sha256 is not None and value != d.sha256:
        raise DatasetError(
            f"sha256={value} differs from the registry's {d.sha256} for dataset {name!r}"
        )
    return value


def _file_downloader(url: str, output_file: Any, pooch_obj: Any, check_only: bool = False) -> Any:
    """A pooch downloader for ``file://`` URLs (a local mirror or copy of a dataset)."""
    src = Path(unquote(urlparse(url).path))
    if check_only:
        return src.is_file()
    if not src.is_file():
        raise FileNotFoundError(f"{src} not found")
    if hasattr(output_file, "write"):
        with open(src, "rb") as fh:
            shutil.copyfileobj(fh, output_file)
    else:
        shutil.copyfile(src, output_file)
    return None


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def fetch(
    name: str,
    *,
    url: str | None = None,
    sha256: str | None = None,
    force: bool = False,
    progress: bool = False,
) -> tuple[Path, str]:
    """Download dataset ``name`` into the cache (no-op for a shipped or already cached one).

    :param name: a registry name.
    :param url: download from here instead (a mirror, or ``file:///path`` of a local
        copy); the file is checked the same way.
    :param sha256: the SHA-256 the file must have (needed only where the registry has none;
        where it has one, the two must agree).
    :param force: download again even when the file is in the cache.
    :param progress: show a progress bar (when tqdm is installed).
    :returns: ``(path, sha256)`` of the local file.
    :raises DatasetError: unknown name, pooch missing, checksum mismatch, network failure.
    """
    d = get(name)
    sha256 = check_sha256(name, sha256)
    if d.shipped:
        p = path(name)
        return p, sha256_of(p)
    try:
        import pooch
    except ImportError:
        raise DatasetError(
            f"downloading dataset {name!r} needs pooch: run {INSTALL_HINT}"
        ) from None
    folder = data_dir()
    target = folder / d.filename
    record = folder / (d.filename + ".sha256")
    expected = d.sha256 or sha256
    hint = ""
    if expected is None and record.is_file():
        words = record.read_text().split()
        expected = words[0] if words else None
        hint = (
            f" (the SHA-256 recorded at the first fetch, in {record}: the upstream file has "
            "changed; delete that file to accept the new one)"
        )
    if force and target.exists():
        target.unlink()
    src = cast(str, url or d.url)  # a dataset that is not shipped has a url
    downloader = _file_downloader if src.startswith("file://") else None
    if downloader is None and progress:
        try:
            import tqdm  # noqa: F401
        except ImportError:
            pass
        else:
            downloader = pooch.HTTPDownloader(progressbar=True)
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel("WARNING")  # the caller reports what was fetched (pooch logs at INFO)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        got = pooch.retrieve(
            src,
            known_hash=f"sha256:{expected}" if expected else None,
            fname=d.filename,
            path=folder,
            downloader=downloader,
            progressbar=False,
        )
    except (
        Exception
    ) as exc:  # a checksum mismatch (pooch removes the download), network, HTTP, files
        if isinstance(exc, ValueError) and "does not match the known hash" in str(exc):
            raise DatasetError(
                f"dataset {name!r} from {src}: SHA-256 mismatch, the download was refused and "
                f"removed: expected {expected}{hint}"
            ) from None
        raise DatasetError(
            f"could not download dataset {name!r} from {src}: {type(exc).__name__}: {_one_line(exc)}"
        ) from None
    finally:
        logger.setLevel(level)
    got = Path(got)
    digest = sha256_of(got)
    if expected is not None and digest != expected:  # a cached file changed on disk
        got.unlink()
        raise DatasetError(
            f"dataset {name!r}: the file in the cache had SHA-256 {digest}, expected {expected}; "
            f"it was removed, run `{fetch_command(name)}` again"
        )
    if d.sha256 is None and not record.is_file():
        record.write_text(f"{digest}  {d.filename}\n")
    return got, digest


def print_list(as_json: bool) -> None:
    """Print the datasets (``batch-env data list``): each with its state here (shipped,
    fetched, or the command that fetches it), or, with ``as_json``, the registry as JSON
    with the cache folder."""
    import json

    if as_json:
        rows = [
            {**d.to_dict(), "available": is_available(d.name), "file": str(_cached(d))}
            for d in DATASETS.values()
        ]
        print(json.dumps({"data_dir": str(data_dir()), "datasets": rows}, indent=1))
        return
    width = max(len(n) for n in DATASETS)
    for d in DATASETS.values():
        if d.shipped:
            state = "shipped"
        else:
            state = "fetched" if is_available(d.name) else "not fetched"
        print(f"{d.name.ljust(width)}  {state.ljust(11)}  {d.description}")
    print(f"cache folder: {data_dir()} (set {DATA_DIR_ENV} to change it)", file=sys.stderr)
