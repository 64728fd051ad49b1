"""``batch-env data list`` and ``batch-env data fetch NAME``: the public datasets that
traces can name (:mod:`batch_env.workload.datasets`, docs/data.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from batch_env.workload import datasets as data
from experiments.harness.config import one_line
from experiments.harness.options import add_json


def cmd_data(args: argparse.Namespace) -> int:
    """List the known datasets or fetch one (``batch-env data list``, ``batch-env data fetch NAME``).

    Traces name a dataset instead of a file: ``{kind: trace, dataset: azure-conv-2023}``.
    Shipped excerpts (``azure-conv-2023-excerpt``, ``azure-code-2023-excerpt``) need no
    download; the full traces are fetched once into the cache folder ($BATCH_ENV_DATA_DIR,
    else the user's cache folder) and checked against their SHA-256 (docs/data.md).
    An unknown name is exit status 2; a failed download or a checksum mismatch, 1.
    """

    if args.data_command == "list":
        data.print_list(args.json)
        return 0
    d = data.get(args.name)  # an unknown name: DatasetError (a ValueError), exit status 2
    data.check_sha256(d.name, args.sha256)  # a malformed or contradicting --sha256: the same
    if not d.shipped and not args.force and data.is_available(d.name):
        print(f"{d.name}: already in the cache", file=sys.stderr)
    elif not d.shipped:
        print(f"{d.name}: downloading {args.url or d.url}", file=sys.stderr)
    try:
        path, digest = data.fetch(
            d.name,
            url=args.url,
            sha256=args.sha256,
            force=args.force,
            progress=not args.no_progress,
        )
    except data.DatasetError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    if d.shipped:
        print(f"{d.name}: shipped with the package, no download needed", file=sys.stderr)
    if d.sha256 is not None:
        print(f"{d.name}: SHA-256 {digest} (matches the registry)", file=sys.stderr)
    elif args.sha256 is not None:
        print(f"{d.name}: SHA-256 {digest} (matches --sha256)", file=sys.stderr)
    else:
        print(
            f"warning: {d.name} has no published checksum; SHA-256 of this download: {digest} "
            f"(recorded in {path}.sha256: later fetches must match it)",
            file=sys.stderr,
        )
    print(path)
    return 0


def add_parser(sub: Any) -> None:
    """Add this module's subcommand(s) to ``batch-env``'s subparsers."""
    p = sub.add_parser(
        "data",
        help="list and fetch the public datasets traces can name (docs/data.md)",
        description=cmd_data.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dsub = p.add_subparsers(dest="data_command", metavar="{list,fetch}", required=True)
    q = dsub.add_parser(
        "list",
        help="the known datasets, and which are shipped or fetched",
        description="The known datasets: shipped (no download), fetched (in the "
        "cache) or not fetched; the cache folder on stderr.",
    )
    add_json(q, "the registry")
    q.set_defaults(func=cmd_data)
    q = dsub.add_parser(
        "fetch",
        help="download a dataset into the cache and check its SHA-256",
        description="Download dataset NAME into the cache folder ($BATCH_ENV_DATA_DIR "
        "or the user's cache) and check its SHA-256; needs pip install 'batch-env[data]'. "
        "A shipped dataset or one already fetched is not downloaded again.",
    )
    q.add_argument("name", help="a dataset name (see batch-env data list)")
    q.add_argument(
        "--url",
        default=None,
        help="download from here instead: a mirror, or file:///path of a local copy",
    )
    q.add_argument(
        "--sha256",
        default=None,
        help="the SHA-256 the file must have (for a dataset whose registry entry has none)",
    )
    q.add_argument(
        "--force", action="store_true", help="download again even when the file is in the cache"
    )
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.set_defaults(func=cmd_data)
