"""Write one page per environment and per benchmark task (``docs/envs/``, ``docs/tasks/``),
and the command-line reference (``docs/cli.md``).

Each page is generated from the code at build time, in Gymnasium's env-page layout, so it
cannot drift from what ``gymnasium.make`` gives:

- an env page takes the env class's docstring (Description, Action Space, Observation
  Space, Rewards, Starting State, Episode End, Arguments, Version History, written in
  Markdown as Gymnasium's are), the spaces of a default instance, a rendered frame
  (``docs/img/render_*.png``, written by ``scripts/render_frames.py``) and, where
  ``docs/envs/usage/<Name>.md`` exists, its hand-written usage section;
- a task page takes the :class:`batch_env.tasks.Task` entry (what it is, what makes it
  hard, the fixed kwargs, the protocol, the bound), the stored reference figures with
  their normalized scores, and a frame of the task's own env rendered at build time
  (its largest valid action for 300 steps from its first held-out seed).

In the API reference (autodoc), an env class's Markdown docstring is replaced by its
first line and a link to its page, since reStructuredText cannot read it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
from pathlib import Path

from sphinx.application import Sphinx

# scripts/render_frames.py's PNG writer draws the task pages' frames
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

#: frame file per env id (docs/img/; scripts/render_frames.py draws them)
FRAMES = {
    "batch_env/DynamicBatching-v0": "render_dynamic.png",
    "batch_env/NodeBatching-v0": "render_node.png",
    "batch_env/LLMBatching-v0": "render_llm.png",
    "batch_env/LLMBatching-v1": "render_llm_v1.png",
    "batch_env/LLMBatching-v2": "render_llm_v2.png",
    "batch_env/LLMRouting-v0": "render_routing.png",
}
_ROLE = re.compile(r":(class|func|meth|mod|attr|data|obj|exc):`~?([^`]+)`")


def batch_env_ids() -> tuple[str, ...]:
    """The registered env ids (``batch_env.ENV_IDS``)."""
    import batch_env

    return batch_env.ENV_IDS


def slug(env_id: str) -> str:
    """``batch_env/DynamicBatching-v0`` -> ``DynamicBatching-v0``."""
    return env_id.split("/", 1)[1]


def env_class(env_id: str) -> type:
    """The class a registered id's entry point names."""
    import batch_env

    module, name = batch_env._ENTRY_POINTS[env_id].split(":")
    return getattr(importlib.import_module(module), name)


def markdown_docstring(cls: type) -> str:
    """The class docstring with RST roles turned into MyST's ``{role}`` form (a bare name
    taken as one of the class's own module)."""
    doc = inspect.getdoc(cls) or ""

    def role(m: re.Match[str]) -> str:
        target = m.group(2)
        if "." not in target:
            target = f"{cls.__module__}.{target}"
        return f"{{py:{m.group(1)}}}`{target}`"

    return _ROLE.sub(role, doc)


def _sections(doc: str) -> dict[str, str]:
    """``## Heading`` -> its text, in order."""
    out: dict[str, str] = {}
    for part in re.split(r"^## ", doc, flags=re.M)[1:]:
        head, _, body = part.partition("\n")
        out[head.strip()] = body.strip()
    return out


def _inherited_sections(cls: type) -> tuple[type, dict[str, str]] | None:
    """The Gymnasium sections of the nearest base class that has them (for an id that
    only states what it changes, as LLMBatching-v1 does)."""
    for base in cls.__mro__[1:]:
        sections = _sections(markdown_docstring(base))
        if "Description" in sections:
            return base, sections
    return None


def _spaces(env_id: str) -> tuple[str, str, tuple]:
    """A default instance's action and observation spaces (their reprs) and its
    observation's features (``observation_features``)."""
    import gymnasium as gym

    env = gym.make(env_id)
    try:
        features = env.unwrapped.observation_features
        one_line = lambda space: " ".join(repr(space).split())  # noqa: E731 (a table cell)
        return one_line(env.action_space), one_line(env.observation_space), features
    finally:
        env.close()


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell."""
    return text.replace("|", "\\|")


def features_table(features, first_column: list[str] | None = None) -> list[str]:  # noqa: ANN001
    """A Markdown table of observation features (:class:`batch_env.envs.features.ObsFeature`):
    index (or ``first_column``'s entries, under the heading "added by"), name, meaning,
    unit, scale and range."""
    head = "added by" if first_column is not None else "index"
    lines = [
        f"| {head} | name | meaning | unit | scale | range |",
        "|---|---|---|---|---|---|",
    ]
    for i, f in enumerate(features):
        key = first_column[i] if first_column is not None else str(i)
        lines.append(
            f"| {key} | `{f.name}` | {_cell(f.meaning)} | {_cell(f.unit)} | {_cell(f.scale)} "
            f"| [{f.low:g}, {f.high:g}] |"
        )
    return lines


def observation_tables(env_id: str, features) -> list[str]:  # noqa: ANN001
    """The end of an env page's "Observation Space" section: the features of a default
    instance, and, on an LLM id with classes, orders or a clock grid, those they append
    (with the tasks on the id and their feature counts)."""
    lines = [
        f"The {len(features)} features of a default instance "
        f'(`gymnasium.make("{env_id}").unwrapped.observation_features`), generated from the '
        "code; the space's bounds are their ranges:",
        "",
        *features_table(features),
        "",
    ]
    from batch_env.config import LLMConfigV2

    cls = env_class(env_id)
    if getattr(cls, "_config_class", None) is not LLMConfigV2:
        return lines
    from batch_env.envs import llm_observation as lo

    appended = [
        ("`classes` (two or more), for each class", lo.per_class_features(["{class}"])),
        ("`order_features=True`, for each of `orders`", lo.per_order_features(["{order}"])),
        ("`clock_grid`", (lo.CLOCK_FEATURE,)),
    ]
    keys = [key for key, fs in appended for _ in fs]
    lines += [
        f"After these {len(features)}, in this order, come the features of each request "
        "class (with two or more classes, in the order of `classes`), then those of each "
        "admission order (with `order_features=True`, in the order of `orders`), then the "
        "SM clock (with a `clock_grid`); `{class}` and `{order}` stand for the class's and "
        "the order's names:",
        "",
        *features_table([f for _, fs in appended for f in fs], keys),
        "",
    ]
    counts = _task_feature_counts(env_id)
    if counts:
        lines += [
            "The tasks on this id and the length of their observation (each task's page "
            "lists its features): "
            + ", ".join(f"[{slug(t)}](../tasks/{slug(t)}.md) {n}" for t, n in counts)
            + ".",
            "",
        ]
    return lines


def _task_feature_counts(env_id: str) -> list[tuple[str, int]]:
    """The tasks whose base env is ``env_id``, with their observation's length."""
    import warnings

    import gymnasium as gym

    from batch_env import tasks

    out = []
    for task_id, task in tasks.TASKS.items():
        if task.base != env_id:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # superseded tasks warn
            env = gym.make(task_id)
        try:
            out.append((task_id, len(env.unwrapped.observation_features)))
        finally:
            env.close()
    return out


def _insert_into_section(markdown: str, head: str, extra: list[str]) -> str | None:
    """``markdown`` with ``extra`` at the end of its ``## head`` section (``None``: it has
    no such section)."""
    m = re.search(rf"^## {re.escape(head)}\n", markdown, flags=re.M)
    if m is None:
        return None
    nxt = re.search(r"^## ", markdown[m.end() :], flags=re.M)
    end = m.end() + nxt.start() if nxt else len(markdown)
    body = markdown[:end].rstrip()
    return body + "\n\n" + "\n".join(extra).rstrip() + "\n\n" + markdown[end:]


#: How to train on an id with the shipped hyperparameters, on every env and task page.
def training_section(env_id: str) -> list[str]:
    """The "Train on it" section of an env or task page."""
    return [
        "## Train on it",
        "",
        "With the shipped hyperparameters (`agents/hyperparams/`, chosen for these envs):",
        "",
        "```console",
        f"$ batch-env train --env-id {env_id} --run-dir runs/{slug(env_id).lower()}",
        f"$ python -m rl_zoo3.train --algo ppo --gym-packages batch_env --env {env_id} \\",
        "      --conf-file agents.hyperparams.ppo -tb tb",
        "```",
        "",
        "rl-zoo3 finds them only through `--conf-file agents.hyperparams.<algo>`: without it, it "
        "trains with its plain defaults, which collapse on these envs "
        "([training](../tutorials/train.md)).",
        "",
    ]


#: where ``batch-env headroom`` stores each task's figures (in the repository)
HEADROOM_DIR = Path(__file__).resolve().parents[2] / "results" / "headroom"


def headroom_section(task_id: str) -> list[str]:
    """The "Headroom" section of a task page: what ``batch-env headroom`` measured, from
    ``results/headroom/<task>.json`` (none where the task has not been measured)."""
    path = HEADROOM_DIR / f"{slug(task_id)}.json"
    if not path.exists():
        return []
    r = json.loads(path.read_text())
    f = r["figures"]

    def cell(key: str) -> str:
        x = f.get(key)
        if x is None:
            return "not measured"
        ci = x.get("rel_ci95")
        tail = f" ± {100 * ci:.1f}%" if isinstance(ci, float) and ci == ci else ""
        return f"{100 * x['rel']:+.1f}%{tail}"

    pe = r.get("planner_episodes")
    lines = [
        "## Headroom",
        "",
        f"Measured by `batch-env headroom` ([headroom](../headroom.md)): the best constant "
        f"action is {r['best_constant_parts']} (a reward rate of {r['best_constant_rate']:.4g} "
        f"per second on {len(r['held_out']['seeds'])} held-out episodes of "
        f"{r['held_out']['horizon_requests']} requests). Against it, paired, with 95% CIs "
        "(positive: cheaper than it):",
        "",
        "| policy | vs the best constant action |",
        "|---|---|",
        f"| greedy | {cell('greedy')} |",
        f"| the best constant per episode (hindsight) | {cell('best constant per episode')} |",
        *(
            [f"| the task's reference, `{r['reference']['policy']}` | {cell('reference')} |"]
            if "reference" in f
            else []
        ),
        f"| `rollout` (realizable planner) | {cell('rollout')} |",
        f"| `rollout-oracle` (clairvoyant) | {cell('rollout-oracle')} |",
        "",
    ]
    if pe is not None:
        lines += [
            f"The planners ran {len(pe['seeds'])} episodes of {pe['horizon_requests']} requests "
            "(paired with the best constant on the same episodes).",
            "",
        ]
    return lines


def env_page(env_id: str, docs: Path) -> str:
    """The Markdown of one env page."""
    cls = env_class(env_id)
    name = slug(env_id)
    action, obs, features = _spaces(env_id)
    doc = markdown_docstring(cls)
    first, _, rest = doc.partition("\n\n")  # the lead paragraph, then the sections
    obs_tables = observation_tables(env_id, features)
    with_tables = _insert_into_section(rest, "Observation Space", obs_tables)
    if with_tables is not None:
        rest, obs_tables = with_tables, []
    frame = [f"![a frame of {name}](../img/{FRAMES[env_id]})", ""] if env_id in FRAMES else []
    lines = [
        f"# {name}",
        "",
        *frame,
        "| | |",
        "|---|---|",
        f"| Id | `{env_id}` |",
        f"| Class | {{py:class}}`{cls.__module__}.{cls.__name__}` |",
        f"| Action space (defaults) | `{action}` |",
        f"| Observation space (defaults) | `{obs}` |",
        f'| Make | `gymnasium.make("{env_id}")` after `import batch_env` |',
        "",
        first.strip(),
        "",
        rest.strip(),
        "",
    ]
    inherited = None if "## Description" in doc else _inherited_sections(cls)
    if inherited is not None:
        base, sections = inherited
        base_id = next(e for e in batch_env_ids() if env_class(e) is base)
        lines += [
            f"The sections below are [{slug(base_id)}]({slug(base_id)}.md)'s, which this id "
            "shares except where the text above says otherwise.",
            "",
        ]
        for head, body in sections.items():
            if head != "Version History":
                lines += [f"## {head}", "", body, ""]
            if head == "Observation Space":
                lines += obs_tables
                obs_tables = []
    if obs_tables:  # no Observation Space section: one of its own
        lines += ["## Observation Space", "", *obs_tables]
    lines += training_section(env_id)
    if (docs / "envs" / "usage" / f"{name}.md").exists():
        # included, so that its links stay relative to its own folder (as on GitHub)
        lines += [
            "## Usage",
            "",
            f"```{{include}} usage/{name}.md",
            ":relative-docs: ../",
            ":relative-images:",
            "```",
            "",
        ]
    return "\n".join(lines)


def task_frame(task_id: str, out: Path, steps: int = 300) -> str:
    """Render a frame of the task's own env (``rgb_array``) after ``steps`` steps of its
    largest valid action from its first held-out seed; write it to ``out`` (PNG) and
    return the file's name."""
    import gymnasium as gym
    import numpy as np
    from render_frames import write_png

    from batch_env import tasks

    env = gym.make(task_id, render_mode="rgb_array")
    try:
        env.reset(seed=tasks.get(task_id).seeds[0])
        for _ in range(steps):
            mask = env.unwrapped.action_masks()
            if env.step(int(np.flatnonzero(mask)[-1]))[3]:
                break
        name = f"frame_{slug(task_id)}.png"
        write_png(out / name, env.render())
        return name
    finally:
        env.close()


def task_observation_section(task_id: str) -> list[str]:
    """The "Observation" section of a task page: every feature of the task's own
    observation (``observation_features`` of ``gymnasium.make(task_id)``)."""
    import warnings

    import gymnasium as gym

    from batch_env import tasks

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # superseded tasks warn
        env = gym.make(task_id)
    try:
        features = env.unwrapped.observation_features
        space = repr(env.observation_space)
    finally:
        env.close()
    base = slug(tasks.get(task_id).base)
    return [
        "## Observation",
        "",
        f"`{space}`: {len(features)} features "
        f'(`gymnasium.make("{task_id}").unwrapped.observation_features`, generated from the '
        f"code; [{base}](../envs/{base}.md) says how they are computed):",
        "",
        *features_table(features),
        "",
    ]


def task_page(task_id: str, frame: str | None = None) -> str:
    """The Markdown of one benchmark task's page (``frame``: its image, in the page's folder)."""
    from batch_env import tasks

    task = tasks.get(task_id)
    refs = tasks.references().get(task_id, {})
    name = slug(task_id)
    kwargs = json.dumps(dict(task.kwargs), indent=1, default=str)
    bound = {
        "smdp": "the exact SMDP optimum of the task's own cost",
        "smdp-oracle": "the phase-aware SMDP optimum, a bound for every phase-blind policy",
        "smdp-per-seed": "the exact SMDP optimum at each seed's drawn load, averaged",
        None: "none: the best known realizable policy is the reference",
    }.get(task.bound, str(task.bound))
    lines = [
        f"# {name}",
        "",
        *([f"![a frame of {name}]({frame})", ""] if frame else []),
        *(
            [
                f"**Superseded** by [{slug(task.superseded_by)}]({slug(task.superseded_by)}.md), "
                "the same problem on a newer env; making this id warns "
                "(`DeprecationWarning`). It stays registered so that old results rerun.",
                "",
            ]
            if task.superseded_by
            else []
        ),
        task.summary,
        "",
        "| | |",
        "|---|---|",
        f"| Id | `{task_id}` |",
        f"| Base env | [{slug(task.base)}](../envs/{slug(task.base)}.md) |",
        f"| Bound | {bound} |",
        f"| Protocol | {task.episodes} episodes, one per held-out seed "
        f"{task.seeds[0]}-{task.seeds[-1]}, deterministic |",
        f'| Make | `gymnasium.make("{task_id}")` after `import batch_env` |',
        "",
        "## What makes it hard",
        "",
        task.hard,
        "",
        "## Fixed arguments",
        "",
        "```json",
        kwargs,
        "```",
        "",
        *task_observation_section(task_id),
        *training_section(task_id),
        *headroom_section(task_id),
    ]
    if task.eval_loads:
        lines += [
            "## Evaluation loads",
            "",
            "Each seed's episode runs at a fixed load of a grid (two episodes per load): "
            + ", ".join(f"{x:g}" for x in task.grid_loads)
            + ".",
            "",
        ]
    policies = refs.get("policies", {})
    if policies:
        lines += [
            "## Reference figures",
            "",
            "Stored in `batch_env/tasks_references.json` (`batch-env benchmark --references`): "
            "mean reward rate per second over the protocol's seeds, with its 95% CI "
            "(higher is better), and the normalized score (0: greedy, 1: "
            + ("the bound" if task.bound else "the best realizable reference")
            + '). An oracle reference reads what no server knows (`info["oracle"]`): '
            "its score is the headroom beyond what is realizable, not a 1.",
            "",
            "| policy | reward rate per s | normalized score |",
            "|---|---|---|",
        ]
        for pol, fig in policies.items():
            rate = fig["reward_rate_per_s"]
            try:
                score = f"{tasks.normalized_score(task, rate):.3f}"
            except ValueError:
                score = "undefined"
            label = f"`{pol}` (oracle)" if fig.get("oracle") else f"`{pol}`"
            lines.append(
                f"| {label} | {rate:.2f} ± {fig.get('ci95', float('nan')):.2f} | {score} |"
            )
        if refs.get("bound_reward_rate_per_s") is not None:
            lines.append(f"| bound | {refs['bound_reward_rate_per_s']:.2f} | 1.000 |")
        lines.append("")
    lines += [
        f"Score a policy: `batch-env benchmark --tasks {task_id} --policy greedy` "
        "([the benchmark](../benchmark.md)).",
        "",
    ]
    return "\n".join(lines)


def write_pages(docs: Path) -> None:
    """Write every env and task page and their index pages under ``docs``."""
    import batch_env
    from batch_env import tasks

    _write(docs / "cli.md", cli_page())
    envs_dir, tasks_dir = docs / "envs", docs / "tasks"
    envs_dir.mkdir(exist_ok=True)
    tasks_dir.mkdir(exist_ok=True)
    for env_id in batch_env.ENV_IDS:
        _write(envs_dir / f"{slug(env_id)}.md", env_page(env_id, docs))
    for task_id in tasks.TASKS:
        frame = task_frame(task_id, tasks_dir)
        _write(tasks_dir / f"{slug(task_id)}.md", task_page(task_id, frame))
    env_rows = [
        f"| [{slug(e)}]({slug(e)}.md) | {(inspect.getdoc(env_class(e)) or '').splitlines()[0]} |"
        for e in batch_env.ENV_IDS
    ]
    _write(
        envs_dir / "index.md",
        _index_page(
            "Environments",
            "Importing `batch_env` registers these ids with Gymnasium. Each page follows "
            "Gymnasium's layout; the benchmark tasks ([Tasks](../tasks/index.md)) are "
            "fixed configurations of them.",
            ["env", "what it decides"],
            env_rows,
            [slug(e) for e in batch_env.ENV_IDS],
        ),
    )
    task_rows = [
        f"| [{slug(t)}]({slug(t)}.md) | {slug(tasks.TASKS[t].base)} | {tasks.TASKS[t].summary} |"
        for t in tasks.TASKS
    ]
    _write(
        tasks_dir / "index.md",
        _index_page(
            "Benchmark tasks",
            "Named, registered configurations with a fixed evaluation protocol, exact "
            "bounds where the theory gives one, and normalized scores "
            "([the benchmark](../benchmark.md)).",
            ["task", "env", "what it is"],
            task_rows,
            [slug(t) for t in tasks.TASKS],
        ),
    )


def _index_page(
    title: str, intro: str, columns: list[str], rows: list[str], pages: list[str]
) -> str:
    """An index page: a table of its pages and a hidden table of contents of them."""
    return "\n".join(
        [
            f"# {title}",
            "",
            intro,
            "",
            "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns),
            *rows,
            "",
            "```{toctree}",
            ":hidden:",
            "",
            *pages,
            "```",
            "",
        ]
    )


def cli_page() -> str:
    """The command-line reference: ``batch-env --help`` and every subcommand's, as the
    parser prints them (so the page is what a user's terminal shows)."""
    import argparse

    from experiments.cli import build_parser

    parser = build_parser()
    lines = [
        "# Command line",
        "",
        "Every subcommand of `batch-env`, with the help its `--help` prints "
        "(generated from the parser, `experiments/cli.py`).",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
        "",
    ]
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subs.choices.items():
        lines += [f"## `batch-env {name}`", "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _env_docstring(app, what, name, obj, options, lines):  # noqa: ANN001 (Sphinx's hook)
    import batch_env

    if what != "class":
        return
    for env_id in batch_env.ENV_IDS:
        if env_class(env_id) is obj and any(line.startswith("## ") for line in lines):
            first = lines[0] if lines else ""
            lines[:] = [
                first,
                "",
                f"The full documentation is on the env page: :doc:`/envs/{slug(env_id)}`.",
                "",
            ]
            return


def _generate(app: Sphinx) -> None:
    write_pages(Path(app.srcdir))


def setup(app: Sphinx) -> dict:
    """Sphinx extension entry point."""
    app.connect("builder-inited", _generate)
    app.connect("autodoc-process-docstring", _env_docstring)
    return {"parallel_read_safe": True}
