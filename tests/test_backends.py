"""Backend choice without Ray running: validation, clear errors, Ray missing, local fault semantics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.cli import main
from experiments.compare import run_compare
from experiments.harness.backends import RayUnavailableError, check_backend, require_ray, run_tasks

TINY = {
    "name": "tiny",
    "env": {"profile": "resnet50-v100", "decision_interval_ms": 0.5, "horizon_requests": 100},
    "workloads": {"poisson": {"kind": "poisson"}},
    "loads": [0.5],
    "seeds": 1,
    "reference": "greedy",
    "policies": {
        "greedy": {},
        "broken": {"name": "static", "batch_size": 0},
        "static-4": {"name": "static", "batch_size": 4},
    },
}


@pytest.fixture
def no_ray(monkeypatch):
    """Make ``import ray`` fail as if the extra were not installed."""
    monkeypatch.setitem(sys.modules, "ray", None)


def test_check_backend_names_field_value_and_allowed():
    check_backend("local")
    check_backend("ray", "auto")
    with pytest.raises(
        ValueError, match=r"backend='dask' is unknown: allowed values are \['local', 'ray'\]"
    ):
        check_backend("dask")
    with pytest.raises(ValueError, match=r"address='auto' needs backend='ray'"):
        check_backend("local", "auto")


def test_local_backend_records_a_raising_cell_and_goes_on(tmp_path):
    res = run_compare(TINY, results_dir=tmp_path, progress=False)
    assert res["computed"] == 2 and [f["policy"] for f in res["failed"]] == ["broken"]
    assert "batch_size=0 is out of range" in res["failed"][0]["error"]
    assert "Traceback" in res["failed"][0]["traceback"]
    assert "## Failed cells: 1" in res["markdown"] and "| broken |" in res["markdown"]
    assert len(list((res["dir"] / "cells").glob("*.json"))) == 2  # the failed cell is not written
    again = run_compare(TINY, results_dir=tmp_path, progress=False)
    assert (
        again["reused"] == 2 and again["computed"] == 0 and len(again["failed"]) == 1
    )  # retried, fails again


def test_run_tasks_local_keeps_order_and_errors():
    def f(x):
        if x == 2:
            raise RuntimeError("two")
        return x * 10

    outs = list(run_tasks(f, [1, 2, 3]))
    assert [(o.index, o.value, o.error) for o in outs] == [
        (0, 10, None),
        (1, None, "RuntimeError: two"),
        (2, 30, None),
    ]


def test_ray_missing_says_how_to_install(no_ray, tmp_path, capsys):
    with pytest.raises(RayUnavailableError, match=r"pip install 'batch-env\[ray\]'"):
        require_ray()
    with pytest.raises(RayUnavailableError):
        run_compare(TINY, results_dir=tmp_path, progress=False, backend="ray")
    assert (
        main(["compare", "--config", "demo", "--backend", "ray", "--results-dir", str(tmp_path)])
        == 2
    )
    assert "pip install 'batch-env[ray]'" in capsys.readouterr().err
    # the local backend does not need Ray
    assert run_compare(TINY, results_dir=tmp_path, progress=False)["computed"] == 2


def test_compare_cli_backend_errors(tmp_path, capsys):
    assert (
        main(["compare", "--config", "demo", "--address", "auto", "--results-dir", str(tmp_path)])
        == 2
    )
    assert "address='auto' needs backend='ray'" in capsys.readouterr().err
    assert (
        main(["compare", "--config", "demo", "--num-cpus", "2", "--results-dir", str(tmp_path)])
        == 2
    )
    assert "num_cpus=2 needs backend='ray'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["compare", "--backend", "dask"])
    assert "invalid choice: 'dask'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    out = capsys.readouterr().out
    assert "--backend {local,ray}" in out and "--address" in out and "--max-retries" in out


def test_local_backend_does_not_import_ray(tmp_path):
    import subprocess

    code = (
        "import sys; from experiments.compare import run_compare; "
        f"run_compare({TINY!r}, results_dir={str(tmp_path)!r}, progress=False); "
        "sys.exit(1 if 'ray' in sys.modules else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bench_backends_is_skipped_without_ray(no_ray):
    from experiments.bench.backends import bench_backends

    r = bench_backends()
    assert set(r) == {"skipped"} and "pip install 'batch-env[ray]'" in r["skipped"]


def test_process_pools_do_not_fork_a_process_that_ran_torch(tmp_path):
    """Experiment workers start from a fresh interpreter: forked from a process that ran
    PyTorch on two threads, a worker hangs in its first parallel kernel (reproduced with
    a fork context: this script then times out)."""
    script = tmp_path / "pool.py"
    script.write_text(
        "import torch\n"
        "from experiments.harness.backends import process_pool\n"
        "def job(i):\n"
        "    return float(torch.nn.init.orthogonal_(torch.empty(256, 256)).sum())\n"
        "if __name__ == '__main__':\n"
        "    torch.set_num_threads(2)\n"
        "    torch.nn.init.orthogonal_(torch.empty(256, 256))\n"
        "    with process_pool(2) as pool:\n"
        "        print(len(list(pool.map(job, range(4)))))\n"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "4"


def test_a_pool_worker_ends_when_the_process_that_made_the_pool_is_killed(tmp_path):
    """SIGKILL the process that owns a pool while a worker runs a job: the worker ends
    within about a second instead of finishing the job (it would write into a folder a
    rerun is using) and living on (a forkserver worker is not the owner's child)."""
    (tmp_path / "slowjob.py").write_text(
        "import os, time\n"
        "def job(path):\n"
        "    open(path + '.pid', 'w').write(str(os.getpid()))\n"
        "    time.sleep(4)\n"
        "    open(path, 'w').write('written after the owner died')\n"
    )
    (tmp_path / "owner.py").write_text(
        "import sys, time\n"
        "import slowjob\n"
        "from experiments.harness.backends import process_pool\n"
        "if __name__ == '__main__':\n"
        "    pool = process_pool(1)\n"
        "    pool.submit(slowjob.job, sys.argv[1])\n"
        "    time.sleep(60)\n"
    )
    root = Path(__file__).resolve().parents[1]
    target = tmp_path / "out"
    owner = subprocess.Popen(
        [sys.executable, str(tmp_path / "owner.py"), str(target)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{tmp_path}"},
    )
    try:
        pid_file = tmp_path / "out.pid"
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the worker never started"
            time.sleep(0.05)
        worker = int(pid_file.read_text())
    finally:
        owner.kill()
    owner.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail(f"worker {worker} outlived the pool's owner by 10 s")
    time.sleep(4.5)  # past the job's end, had it gone on
    assert not target.exists()
