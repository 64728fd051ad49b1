"""The parts ``make test`` runs the suite in (``tests/conftest.py`` marks the tests;
``Makefile`` runs the parts): everything else on two workers, then :data:`RACING_FILES`
two files at a time, then :data:`SERIAL_FILES` one test at a time.

``python tests/suite_parts.py racing`` (or ``serial``) prints a part's files, so that
pytest collects only them (collecting the whole suite takes about 14 s).
"""

from __future__ import annotations

import sys

#: Test files that time real work: ``make test`` runs them last, one at a time (marker
#: ``serial``), on a machine nothing else loads; everything else runs on ``-n 2`` workers.
SERIAL_FILES = {
    "test_real_mode.py",
    "test_torch_executor.py",
    "test_llm_real_mode.py",
    "test_energy.py",
    "test_profiling.py",
    "test_bench_wallclock.py",
}
#: Test files that race processes against the clock (kill a command at its k-th file, a
#: worker that dies, a local Ray instance): ``make test`` runs them after the parallel
#: part and before the serial one, two files at a time (marker ``racing``; ``-n 2 --dist
#: loadfile``: each file on one worker, its tests in turn), not beside the parallel
#: part's tests. Two of them at once took 92-99 s where one at a time took 130 s
#: (2026-12-07, this project's 2-core VM: mostly waits on subprocesses and Ray's start).
RACING_FILES = {
    "test_reliability.py",
    "test_faults.py",
    "test_backends.py",
    "test_ray_backend.py",
    "test_sweep.py",
}


if __name__ == "__main__":
    part = {"racing": RACING_FILES, "serial": SERIAL_FILES}.get(
        sys.argv[1] if len(sys.argv) > 1 else ""
    )
    if part is None:
        sys.exit("usage: python tests/suite_parts.py racing|serial")
    print(" ".join(f"tests/{name}" for name in sorted(part)))
