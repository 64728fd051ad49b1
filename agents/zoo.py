"""Run an rl-zoo3 script with the batch_env ids registered:
``python -m agents.zoo <script> [its arguments]``.

``rl_zoo3.train`` and ``rl_zoo3.enjoy`` take ``--gym-packages batch_env``, but
``rl_zoo3.record_video`` (and ``record_training``) have no such option and look the env id
up before anything imports ``batch_env``. This launcher imports ``batch_env`` first, then
runs ``rl_zoo3.<script>`` as ``__main__`` with the remaining arguments, e.g.::

    python -m agents.zoo record_video --algo ppo --env batch_env/DynamicBatching-v0 \\
        -f logs/ -n 1000

Scripts: ``train``, ``enjoy``, ``record_video``, ``record_training``, ``plots.plot_train``,
``plots.all_plots``, ``plots.plot_from_file`` (any module of ``rl_zoo3``).
"""

from __future__ import annotations

import runpy
import sys


def main(argv: list[str] | None = None) -> int:
    """Import ``batch_env`` (registering its ids), then run ``rl_zoo3.<argv[0]>`` as a script
    with ``argv[1:]``. An unknown script is a one-line ``error:`` and exit status 2."""
    import importlib.util

    import batch_env  # noqa: F401  (registers the ids)

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    module = f"rl_zoo3.{argv[0]}"
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        print(
            f"error: script={argv[0]!r} is not an rl-zoo3 script (no module {module}): e.g. train, enjoy, "
            "record_video, plots.plot_train, plots.all_plots",
            file=sys.stderr,
        )
        return 2
    sys.argv = [module, *argv[1:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
