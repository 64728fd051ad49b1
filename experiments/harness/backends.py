"""Where the units of an experiment run: in this process (``local``) or on Ray (``ray``).

The backend only decides *where* a function runs, never *what* runs: ``batch-env
compare`` hands the same :func:`experiments.compare.run_cell` to either backend, and
``batch-env train --sweep`` the same :func:`agents.train.train` (through
:mod:`experiments.sweep`). Both backends have the same fault semantics:

* a unit that raises is reported as failed with its error (type, message, traceback)
  and the others go on; it is not retried (it would fail again: the work is
  deterministic);
* on Ray, a unit whose *worker process dies* (killed, out of memory, ``os._exit``) is
  retried up to ``max_retries`` times (Ray's task ``max_retries``); when the retries run
  out it is reported as failed too.

Ray is optional (``pip install 'batch-env[ray]'``); the local backend never imports it,
so it stays the fast path on one machine. With ``address=None`` the Ray backend starts a
local Ray instance (or uses the one already initialised in this process); with an
address (``"auto"``, ``"ray://head:10001"``, ``"10.0.0.1:6379"``) it joins that cluster.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

BACKENDS = ("local", "ray")
INSTALL_HINT = "pip install 'batch-env[ray]'"


def process_pool(workers: int, fresh: bool = True) -> Any:
    """A ``ProcessPoolExecutor`` of ``workers`` processes, the one process pool of the
    experiments. With ``fresh`` (the default) they are started from a fresh
    interpreter (``forkserver`` where the platform has it, else ``spawn``), never forked
    from this one: a child forked after this process ran PyTorch on several threads can
    hang in its first parallel kernel (a fork keeps the OpenMP pool's locks but not its
    threads; seen in network initialisation, ``torch.nn.init.orthogonal_``). The jobs
    must be module-level functions with picklable arguments, and the workers do not see
    this process's later changes to modules (a test's monkeypatch). Used where workers
    train or load agents (``batch-env agents``). ``fresh=False`` keeps the platform's
    default start method (a fork on Linux: workers start at once and see the parent's
    modules as they are), for jobs that run baselines only, never PyTorch:
    ``experiments.benchmark``'s reference runs."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if not fresh:
        return ProcessPoolExecutor(max_workers=workers)
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_exit_with, initargs=(os.getpid(),)
    )


def _exit_with(owner: int, period_s: float = 0.5) -> None:
    """A pool worker's initializer: end the worker within ``period_s`` of the death of
    ``owner`` (the process that made the pool). A worker started by the forkserver is
    not the owner's child, so nothing else ends it: when the owner is killed
    (SIGKILL, out of memory), it would finish its job and write into a folder that a
    rerun is already using, then live on."""

    def dead() -> bool:
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's: not ours to judge
            return False
        try:  # a killed owner not yet reaped by its parent is a zombie (Linux)
            with open(f"/proc/{owner}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            return False

    def watch() -> None:
        while not dead():
            time.sleep(period_s)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-owner", daemon=True).start()


class RayUnavailableError(ImportError):
    """``--backend ray`` was asked for but Ray is not installed (the message says how to install it)."""


@dataclass
class Outcome:
    """What became of one unit of work.

    :param index: the unit's position in the submitted sequence.
    :param value: the function's return value (None when it failed).
    :param error: ``"<ExceptionType>: <message>"`` when it failed, else None.
    :param traceback: the formatted traceback of the failure, else None.
    """

    index: int
    value: Any = None
    error: str | None = None
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        """True when the unit returned a value."""
        return self.error is None


def check_backend(backend: str, address: str | None = None) -> None:
    """Validate a backend choice; raise ``ValueError`` naming the field, value and what is allowed.

    :param backend: ``"local"`` or ``"ray"``.
    :param address: a Ray cluster address (only with ``backend="ray"``).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is unknown: allowed values are {list(BACKENDS)}")
    if address is not None and backend != "ray":
        raise ValueError(
            f"address={address!r} needs backend='ray' (--backend ray); the {backend} backend "
            "runs in this process"
        )


def require_ray() -> Any:
    """Import and return ``ray``, or raise :class:`RayUnavailableError` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailableError(
            f"backend='ray' needs Ray, which is not installed ({exc}): install it with {INSTALL_HINT}"
        ) from None
    return ray


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """Ray, initialised for the duration of the block (shut down after it, if started here).

    An already initialised Ray (``ray.init`` called by the caller) is used as it is and
    left running.

    :param address: cluster to join; None starts a local instance.
    :param num_cpus: CPUs of a local instance (default: all); not allowed with an address.
    """
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    if address is not None and num_cpus is not None:
        raise ValueError(
            f"num_cpus={num_cpus!r} applies to a local Ray instance: a cluster at "
            f"address={address!r} has its own CPUs"
        )
    if num_cpus is not None and (
        isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1
    ):
        raise ValueError(f"num_cpus={num_cpus!r} is invalid: expected an integer >= 1")
    kwargs: dict[str, Any] = {"log_to_driver": False}
    if address is not None:
        kwargs["address"] = address
    else:
        kwargs.update(num_cpus=num_cpus, include_dashboard=False)
    ray.init(**kwargs)
    try:
        yield ray
    finally:
        ray.shutdown()


def guarded(fn: Callable[[Any], Any], item: Any) -> tuple[Any, str | None, str | None]:
    """Run ``fn(item)``; an exception becomes ``(None, error, traceback)``. The same wrapper
    runs on both backends, so a raising unit is reported alike on each."""
    try:
        return fn(item), None, None
    except Exception as exc:  # noqa: BLE001 -- recorded and reported, the sweep goes on
        return None, f"{type(exc).__name__}: {exc}", traceback.format_exc()


class OutcomeStream:
    """Outcomes of submitted units, yielded as units finish (iterate over it).

    :meth:`drain` returns, without waiting, the outcomes of units that have finished but
    were not yet yielded, and cancels the rest: an interrupted sweep keeps every result
    that already exists. :meth:`close` cancels what is pending.
    """

    def __iter__(self) -> OutcomeStream:
        return self

    def __next__(self) -> Outcome:
        raise StopIteration

    def drain(self) -> list[Outcome]:
        """Finished but not yet yielded outcomes; cancels the units still running."""
        self.close()
        return []

    def close(self) -> None:
        """Cancel the units still pending."""

    def __enter__(self) -> OutcomeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalStream(OutcomeStream):
    """Units run one after the other in this process, in order, when the next outcome is asked for."""

    def __init__(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> None:
        self.fn, self.items = fn, enumerate(items)

    def __next__(self) -> Outcome:
        i, item = next(self.items)
        value, error, tb = guarded(self.fn, item)
        return Outcome(i, value, error, tb)

    def close(self) -> None:
        self.items = enumerate(())


class RayStream(OutcomeStream):
    """Units as Ray tasks, all submitted at once; outcomes in completion order (``ray.wait``).

    A task whose worker dies is retried up to ``max_retries`` times by Ray; an exception
    raised by the function is not retried and comes back as a failed :class:`Outcome`.
    Ray must be initialised (see :func:`ray_session`).

    :param fn: a picklable function of one argument (module-level, or a closure).
    :param items: its arguments.
    :param max_retries: retries of a task whose worker process died.
    :param num_cpus_per_task: CPUs Ray reserves for each task.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        *,
        max_retries: int = 3,
        num_cpus_per_task: float = 1.0,
    ) -> None:
        ray = require_ray()
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries={max_retries!r} is invalid: expected an integer >= 0")
        self.ray = ray
        task = ray.remote(guarded).options(
            max_retries=max_retries, retry_exceptions=False, num_cpus=num_cpus_per_task
        )
        fn_ref = ray.put(fn)
        self.pending = {task.remote(fn_ref, item): i for i, item in enumerate(items)}
        self.ready: list[Any] = []

    def _outcome(self, ref: Any) -> Outcome:
        i = self.pending.pop(ref)
        try:
            value, error, tb = self.ray.get(ref)
        except Exception as exc:  # noqa: BLE001 -- the worker died past its retries, or Ray failed
            value, error, tb = None, f"{type(exc).__name__}: {_first_line(exc)}", str(exc)
        return Outcome(i, value, error, tb)

    def __next__(self) -> Outcome:
        if not self.ready:
            if not self.pending:
                raise StopIteration
            self.ready, _ = self.ray.wait(list(self.pending), num_returns=1)
        return self._outcome(self.ready.pop())

    def drain(self) -> list[Outcome]:
        if self.pending:
            done, _ = self.ray.wait(list(self.pending), num_returns=len(self.pending), timeout=0)
            self.ready = list(dict.fromkeys([*self.ready, *done]))
        out = [self._outcome(ref) for ref in self.ready]
        self.ready = []
        self.close()
        return out

    def close(self) -> None:
        for ref in self.pending:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)
        self.pending, self.ready = {}, []


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else repr(exc)


def run_tasks(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    backend: str = "local",
    *,
    max_retries: int = 3,
) -> OutcomeStream:
    """Run ``fn`` on every item on ``backend``; iterate over the result for outcomes as units finish.

    :param fn: the unit of work (the same function on either backend).
    :param items: its arguments.
    :param backend: ``"local"`` (in order, in this process) or ``"ray"`` (Ray tasks, in
        completion order; Ray must be initialised, see :func:`ray_session`).
    :param max_retries: Ray only: retries of a task whose worker died.
    """
    check_backend(backend)
    if backend == "local":
        return LocalStream(fn, items)
    return RayStream(fn, items, max_retries=max_retries)
