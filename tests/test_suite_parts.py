"""The parts ``make test`` runs (tests/suite_parts.py): every listed file exists, no file
is in two parts, and the command line the Makefile reads prints each part's files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from suite_parts import RACING_FILES, SERIAL_FILES

TESTS = Path(__file__).resolve().parent


def test_the_parts_list_existing_files_once():
    assert not RACING_FILES & SERIAL_FILES
    for name in RACING_FILES | SERIAL_FILES:
        assert (TESTS / name).is_file(), name


def test_the_makefile_reads_each_part_from_the_module():
    makefile = (TESTS.parent / "Makefile").read_text()
    for part, files in (("racing", RACING_FILES), ("serial", SERIAL_FILES)):
        assert f"tests/suite_parts.py {part})" in makefile, part
        out = subprocess.run(
            [sys.executable, str(TESTS / "suite_parts.py"), part],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert sorted(out) == sorted(f"tests/{name}" for name in files)
    bad = subprocess.run(
        [sys.executable, str(TESTS / "suite_parts.py"), "nope"], capture_output=True, text=True
    )
    assert bad.returncode != 0 and "usage" in bad.stderr
