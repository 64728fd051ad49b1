"""The import contract between the packages, checked on the source with ``ast``.

Every import counts: at module level, inside functions, and relative ones (resolved to
absolute names). The rules:

- ``batch_env`` never imports ``baselines``, ``agents``, ``experiments``,
  ``stable_baselines3``, ``sb3_contrib`` or ``rl_zoo3``;
- ``torch`` is imported only inside ``batch_env/real/``;
- outside ``batch_env/real/``, ``batch_env.real`` is imported only inside functions (when
  real execution is asked for), never at module level;
- ``batch_env/envs`` may import the core; the core (``batch_env`` outside ``envs/``) never
  imports ``batch_env.envs`` except the package ``__init__``, which registers the ids;
- ``batch_env.checks`` imports nothing from ``batch_env``;
- ``batch_env.llm`` (the LLM server) imports of ``batch_env`` only itself, the loop
  (``core``), ``config``, ``executor``, ``metrics``, ``profiles``, ``workload`` and
  ``checks`` (``render`` for types only): never the envs;
- ``baselines`` imports ``batch_env`` only (not ``agents``, ``experiments``);
- ``agents`` imports ``batch_env`` and ``baselines``, not ``experiments``;
- nothing outside ``experiments`` imports ``experiments``;
- ``experiments/harness/`` (what every experiment shares) imports no experiment: the
  experiments import the harness, never the other way round.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("batch_env", "baselines", "agents", "experiments")
TRAINING = ("stable_baselines3", "sb3_contrib", "rl_zoo3")


@dataclass(frozen=True)
class Import:
    """One imported module: where, what (absolute), and whether at module level."""

    file: str  # path relative to the repository root
    line: int
    module: str  # absolute dotted name (``from a import b`` gives ``a`` and ``a.b``)
    top_level: bool  # not inside a function (class bodies and if/try blocks count as top level)


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[Import]:
    """Every import in ``path`` (relative ones resolved against its package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    rel = str(path.relative_to(ROOT))
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            )
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Import(rel, child.lineno, alias.name, not in_function))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                found.append(Import(rel, child.lineno, mod, not in_function))
                for alias in child.names:  # ``from pkg import submodule``
                    found.append(Import(rel, child.lineno, f"{mod}.{alias.name}", not in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def python_files(top: str) -> list[Path]:
    return sorted((ROOT / top).rglob("*.py"))


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(files: list[Path], rule) -> list[str]:
    """``file:line imports module`` for every import that ``rule(file, imp)`` refuses."""
    bad = []
    for path in files:
        for imp in imports_of(path):
            reason = rule(path, imp)
            if reason:
                where = "" if imp.top_level else " (inside a function)"
                bad.append(f"{imp.file}:{imp.line} imports {imp.module}{where}: {reason}")
    return sorted(set(bad))


def rule_batch_env(path: Path, imp: Import) -> str | None:
    rel = path.relative_to(ROOT / "batch_env").as_posix()
    in_real = rel.startswith("real/")
    in_envs = rel.startswith("envs/")
    for top in ("baselines", "agents", "experiments", *TRAINING):
        if under(imp.module, top):
            return f"batch_env never imports {top}"
    if under(imp.module, "torch") and not in_real:
        return "torch only inside batch_env/real/"
    if under(imp.module, "batch_env.real") and not in_real and imp.top_level:
        return "batch_env.real only inside functions (when real execution is asked for)"
    if under(imp.module, "batch_env.envs") and not in_envs and rel != "__init__.py":
        return "the core never imports batch_env.envs"
    if rel == "checks.py" and under(imp.module, "batch_env"):
        return "batch_env.checks is a leaf: it imports nothing from batch_env"
    return None


def rule_baselines(path: Path, imp: Import) -> str | None:
    for top in ("agents", "experiments"):
        if under(imp.module, top):
            return f"baselines imports only batch_env, not {top}"
    return None


def rule_agents(path: Path, imp: Import) -> str | None:
    return "agents never imports experiments" if under(imp.module, "experiments") else None


def rule_not_experiments(path: Path, imp: Import) -> str | None:
    return "only experiments imports experiments" if under(imp.module, "experiments") else None


def rule_harness(path: Path, imp: Import) -> str | None:
    if under(imp.module, "experiments") and not under(imp.module, "experiments.harness"):
        return "the harness imports no experiment"
    return None


#: what the LLM server package may import of batch_env (besides itself): the loop and what
#: the loop's engines share; never the envs, the real executors or the drawing
LLM_MAY_IMPORT = (
    "batch_env.llm",
    "batch_env.core",
    "batch_env.config",
    "batch_env.executor",
    "batch_env.metrics",
    "batch_env.profiles",
    "batch_env.workload",
    "batch_env.checks",
    "batch_env.planning",  # (the cluster's realizable copies: the planner's model)
)


def rule_llm(path: Path, imp: Import) -> str | None:
    if imp.module == "batch_env.render.Timeline" or imp.module == "batch_env.render":
        return None if not imp.top_level or _type_only(path, imp) else "render only for types"
    if under(imp.module, "batch_env") and not any(under(imp.module, m) for m in LLM_MAY_IMPORT):
        return f"batch_env.llm imports only {', '.join(LLM_MAY_IMPORT)}"
    return None


def _type_only(path: Path, imp: Import) -> bool:
    """Whether the import at ``imp.line`` sits under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            if any(getattr(n, "lineno", 0) == imp.line for n in ast.walk(node)):
                return True
    return False


RULES = {
    "batch_env": (["batch_env"], rule_batch_env),
    "llm": (["batch_env/llm"], rule_llm),
    "baselines": (["baselines"], rule_baselines),
    "agents": (["agents"], rule_agents),
    "outside experiments": (["batch_env", "baselines", "agents", "scripts"], rule_not_experiments),
    "harness": (["experiments/harness"], rule_harness),
}


@pytest.mark.parametrize("name", list(RULES))
def test_import_contract(name):
    tops, rule = RULES[name]
    files = [f for top in tops for f in python_files(top)]
    assert files
    bad = violations(files, rule)
    assert not bad, "import contract broken:\n" + "\n".join(bad)


def test_the_checker_sees_every_kind_of_import(tmp_path, monkeypatch):
    """Imports in functions, relative imports and ``from . import x`` are all seen; a
    violation of each kind is reported."""
    pkg = tmp_path / "batch_env"
    (pkg / "envs").mkdir(parents=True)
    (pkg / "real").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(
        "import numpy\n"
        "from .envs import dynamic_batching\n"  # core -> envs
        "from . import real\n"  # batch_env.real at module level
        "def f():\n"
        "    import torch\n"  # torch outside real/
        "    from .real import models\n"  # fine: inside a function
        "    from experiments import cli\n"  # batch_env -> experiments
    )
    (pkg / "real" / "models.py").write_text("import torch\nfrom ..checks import check_number\n")
    (pkg / "checks.py").write_text("from .config import x\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    bad = violations(sorted(pkg.rglob("*.py")), rule_batch_env)
    text = "\n".join(bad)
    assert "core.py:2 imports batch_env.envs" in text
    assert "core.py:3 imports batch_env.real:" in text
    assert "core.py:5 imports torch (inside a function): torch only" in text
    assert "core.py:7 imports experiments (inside a function)" in text
    assert "checks.py:1 imports batch_env.config" in text
    assert not any("real/models.py" in b for b in bad)
    assert not any(":6 " in b for b in bad), bad  # batch_env.real inside a function is fine


# -- structure: no import circles, no private names across modules --------------------------


def module_graph(tops: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of ``tops`` it imports (at module level or in a function),
    each import resolved to the longest module that exists; a module importing its own
    package's ``__init__`` is not an edge (Python runs that first anyway)."""
    files = {module_name(p): p for top in tops for p in python_files(top)}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for m, path in files.items():
        for imp in imports_of(path):
            t = imp.module
            while t and t not in files:
                t = t.rpartition(".")[0]
            if t and t != m and not (m.startswith(t + ".") and files[t].name == "__init__.py"):
                graph[m].add(t)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_circles():
    """No module of the four packages reaches itself through imports, counting the
    imports inside functions (each circle of the past was closed by one)."""
    found = circles(module_graph())
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def private_imports(files: list[Path]) -> list[str]:
    """``file:line imports NAME from MODULE`` for every ``from MODULE import _NAME`` of a
    private name (one ``_``, not a dunder) from another module."""
    bad = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
                continue
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not name.startswith("__"):
                    rel = path.relative_to(ROOT)
                    bad.append(f"{rel}:{node.lineno} imports {name} from {node.module}")
    return sorted(bad)


def test_no_private_names_cross_modules():
    """No module imports another module's private (``_``-prefixed) name: what another
    module needs is public, with a docstring."""
    files = [f for top in (*PACKAGES, "scripts") for f in python_files(top)]
    bad = private_imports(files)
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_the_structure_checks_see_circles_and_private_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "batch_env"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")  # closed in a function
    (pkg / "b.py").write_text("from .a import f\nfrom .c import _hidden\n")
    (pkg / "c.py").write_text("_hidden = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert circles(module_graph(("batch_env",))) == [["batch_env.a", "batch_env.b"]]
    assert private_imports(sorted(pkg.rglob("*.py"))) == ["batch_env/b.py:2 imports _hidden from c"]


def test_the_harness_rule_refuses_an_experiment_and_allows_the_harness():
    """The harness may import itself and the packages below; an experiment, never."""
    path = ROOT / "experiments/harness/store.py"
    assert rule_harness(
        path, Import("experiments/harness/store.py", 1, "experiments.compare", True)
    )
    assert rule_harness(path, Import("experiments/harness/store.py", 1, "experiments.cli", False))
    assert (
        rule_harness(
            path, Import("experiments/harness/store.py", 1, "experiments.harness.config", True)
        )
        is None
    )
    assert (
        rule_harness(path, Import("experiments/harness/store.py", 1, "agents.files", True)) is None
    )


def test_no_function_in_experiments_is_longer_than_150_lines():
    """The experiment modules stay readable: no function of 150 lines or more (docstring
    included); split such a function into named helpers."""
    root = Path(__file__).resolve().parents[1] / "experiments"
    long = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n >= 150:
                    long.append(f"{path.relative_to(root.parent)}:{node.name} ({n} lines)")
    assert not long, long


# -- the LLM server and the LLM envs (issue 49) --------------------------------------------

LLM_FILES = [
    ROOT / "batch_env/envs/llm_batching.py",
    *sorted((ROOT / "batch_env/llm").glob("*.py")),
]


def core_private_names() -> set[str]:
    """``ServingCore``'s private names: the methods, the attributes it assigns to ``self``
    and the annotated class attributes whose names start with one ``_``, in the classes it
    is made of (``ServingEnv``, ``ServingLoop``, ``ServingCore``)."""
    tree = ast.parse((ROOT / "batch_env/core.py").read_text(encoding="utf-8"))
    names: set[str] = set()

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name in CORE_CLASSES):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef) and private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if private(node.target.id):
                    names.add(node.target.id)
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and private(node.attr)
            ):
                names.add(node.attr)
    return names


CORE_CLASSES = ("ServingEnv", "ServingLoop", "ServingCore")


def core_names_used(files: list[Path]) -> dict[str, list[str]]:
    """Each of ``ServingCore``'s private names that ``files`` reference (by name), with the
    files that do."""
    import re

    used: dict[str, list[str]] = {}
    texts = {f.name: f.read_text(encoding="utf-8") for f in files}
    for name in sorted(core_private_names()):
        pattern = re.compile(r"\b" + re.escape(name) + r"\b")
        where = [f for f, text in texts.items() if pattern.search(text)]
        if where:
            used[name] = where
    return used


def test_the_llm_files_use_few_private_names_of_the_core():
    """The LLM env and the LLM server reach the event loop through its public engine API
    (:class:`batch_env.core.ServingLoop`); of ``ServingCore``'s private names they use at
    most 12 (Gymnasium's side: the order of calls, the render hooks)."""
    names = core_private_names()
    assert {"_needs_reset", "_buf", "_stream", "_coerce_action"} <= names  # it sees them
    used = core_names_used(LLM_FILES)
    assert len(used) <= 12, f"{len(used)} private names of ServingCore used: {used}"


def test_no_private_name_of_another_module_is_written_in_the_llm_files():
    """No LLM file assigns a private attribute of an object other than ``self`` (another
    module's state), nor one of ``ServingCore``'s private attributes on ``self``."""
    bad = private_writes(LLM_FILES, core_private_names())
    assert not bad, "\n".join(bad)


def private_writes(files: list[Path], core: set[str]) -> list[str]:
    """``file:line writes .NAME`` for each assignment, in ``files``, of a private
    attribute of an object other than ``self``/``cls``, or of one of ``core`` on ``self``."""
    bad = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)):
                continue
            if not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            own = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not own or node.attr in core:
                bad.append(f"{path.name}:{node.lineno} writes .{node.attr}")
    return bad


def test_the_llm_checks_see_a_private_write_and_a_forbidden_import(tmp_path):
    """The write check and the import rule above are not blind."""
    f = tmp_path / "x.py"
    f.write_text("def f(self, srv):\n    srv._kv = 1\n    self._buf = []\n    self._mine = 0\n")
    assert private_writes([f], {"_buf"}) == ["x.py:2 writes ._kv", "x.py:3 writes ._buf"]
    imp = Import("batch_env/llm/x.py", 1, "batch_env.envs.llm_batching", True)
    assert rule_llm(f, imp) is not None
    assert rule_llm(f, Import("batch_env/llm/x.py", 1, "batch_env.core", True)) is None


def test_the_llm_env_module_is_a_thin_mdp():
    """``llm_batching.py`` holds the MDP only: at most 600 lines, no class over 400."""
    path = ROOT / "batch_env/envs/llm_batching.py"
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 600
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef):
            size = node.end_lineno - node.lineno + 1
            assert size <= 400, f"class {node.name} is {size} lines"


def test_the_core_name_count_sees_a_private_name_in_an_llm_file(tmp_path):
    """The count above is not blind: a file that reads the loop's buffer is counted."""
    f = tmp_path / "x.py"
    f.write_text("def f(loop):\n    return loop._buf, loop.now\n")
    assert core_names_used([f]) == {"_buf": ["x.py"]}


# -- the KV cache owns the block state (issue 63) ------------------------------------------

#: attributes that hold block state, on the server state (``kv_*``) or on the cache itself
BLOCK_STATE = {"kv_used", "kv_blocks", "kv_total", "kv_watermark"}
KV_FIELDS = {
    "used",
    "blocks",
    "total",
    "watermark",
    "held",
    "units",
    "nfull",
    "cache",
    "lru",
    "free_cached",
}
MUTATORS = {"append", "extend", "pop", "clear", "insert", "remove", "popitem", "update"}


def _is_kv(node: ast.AST) -> bool:
    """Whether ``node`` is the cache object: a name ``kv`` or an attribute ``.kv``."""
    return (isinstance(node, ast.Name) and node.id == "kv") or (
        isinstance(node, ast.Attribute) and node.attr == "kv"
    )


def _block_ref(node: ast.AST, aliases: set[str]) -> bool:
    """Whether ``node`` denotes block state: ``X.kv_blocks``, ``kv.blocks`` (any cache
    field), or a local name bound to one of them."""
    if isinstance(node, ast.Attribute):
        return node.attr in BLOCK_STATE or (node.attr in KV_FIELDS and _is_kv(node.value))
    return isinstance(node, ast.Name) and node.id in aliases


def _aliases(fn: ast.AST) -> set[str]:
    """The local names of ``fn`` bound to block state (in tuple assignments too)."""
    aliases: set[str] = set()
    for node in ast.walk(fn):
        if not isinstance(node, ast.Assign):
            continue
        for t in node.targets:
            if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(t.elts, node.value.elts, strict=False))
            else:
                pairs = [(t, node.value)]
            aliases |= {t.id for t, v in pairs if isinstance(t, ast.Name) and _block_ref(v, set())}
    return aliases


def _writes_block_state(node: ast.AST, aliases: set[str]) -> bool:
    """Whether statement or call ``node`` writes block state."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr in MUTATORS and _block_ref(node.func.value, aliases)
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return False
    for t in targets:
        for sub in ast.walk(t):
            if isinstance(sub, ast.Subscript) and _block_ref(sub.value, aliases):
                return True
            if isinstance(sub, ast.Attribute) and _block_ref(sub, aliases):
                return True
    return False


def block_state_writes(files: list[Path]) -> list[str]:
    """``file:line`` of each write of block state in ``files``: an assignment to it or into
    it (``kv.used += 1``, ``s.kv_blocks[e] = 0``, ``blk[e] += 1`` after ``blk =
    s.kv.blocks``), or a mutating call on it (``kv.blocks.append(0)``)."""
    bad = set()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                aliases = _aliases(fn)
                bad |= {
                    f"{path.name}:{node.lineno}"
                    for node in ast.walk(fn)
                    if _writes_block_state(node, aliases)
                }
    return sorted(bad)


KV_CACHE_FILES = {"kv_cache.py", "prefix_cache.py"}


def test_block_state_is_written_only_by_the_kv_cache():
    """Issue 63: the KV cache (``batch_env/llm/kv_cache.py``) is the only writer of block
    state; the schedulers, the server and the envs read it and call its operations."""
    files = [
        f
        for f in sorted((ROOT / "batch_env").rglob("*.py"))
        if not (f.parent.name == "llm" and f.name in KV_CACHE_FILES)
    ]
    bad = block_state_writes(files)
    assert not bad, f"block state written outside the KV cache: {bad}"


def test_the_block_state_check_sees_every_kind_of_write(tmp_path):
    """The check above is not blind: direct, augmented, aliased, subscript and mutating
    writes are all seen; reads are not."""
    f = tmp_path / "x.py"
    f.write_text(
        "def f(s, kv):\n"
        "    s.kv_used += 1\n"
        "    s.kv.blocks[3] = 0\n"
        "    blk = s.kv.blocks\n"
        "    blk[2] += 1\n"
        "    kv.used = 4\n"
        "    P, b = s.prompt, kv.blocks\n"
        "    b[0] -= 1\n"
        "    kv.blocks.append(0)\n"
        "    x = kv.used + s.kv_blocks[1] + blk[0]\n"
        "    return x\n"
    )
    assert block_state_writes([f]) == [f"x.py:{n}" for n in (2, 3, 5, 6, 8, 9)]


def test_no_class_in_the_llm_room_exceeds_500_lines():
    """Issue 63: the LLM room is split by owner (server, intake, KV cache, schedulers, ...);
    no class of ``batch_env/llm/`` is over 500 lines."""
    big = []
    for path in sorted((ROOT / "batch_env/llm").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 500:
                big.append(f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not big, big
