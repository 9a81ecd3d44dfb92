"""The package DAG (docs/layering.md): every rollarc import, top-level or inside a function, follows the layers.

Imports under ``if TYPE_CHECKING:`` are skipped: they never run, so they add neither an import-time
cycle nor a heavy dependency, and they are how a lower layer names a higher layer's config type.
Each failure names the importing module, its line, the imported module and the rule it breaks.
"""

from __future__ import annotations

import ast
import functools
import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import rollarc

PACKAGE_ROOT = Path(rollarc.__file__).parent

# The layers, lowest first. A unit (a subpackage, or a top-level module of rollarc) may import only units
# of its own layer or of lower layers; within a layer, the package graph must stay acyclic.
LAYERS: list[tuple[str, set[str]]] = [
    (
        "foundation",
        {
            "rollarc",
            "lazy_exports",
            "config.io",
            "config.cluster",
            "config.plugin_path",
            "rayproc",
        },
    ),
    ("policy", {"policy"}),
    ("core", {"algo", "sync", "engine", "envs", "data", "models", "report", "serve", "spotlight"}),
    ("agent", {"agent"}),
    ("rewards", {"rewards"}),
    (
        "config",
        {
            "config",
            "config.model",
            "config.tasks",
            "config.train",
            "config.asynchrony",
            "config.elastic",
            "config.harvest",
            "config.run",
        },
    ),
    ("train-and-plan", {"cluster", "sim", "train", "rose"}),
    ("diffusion", {"diffusion"}),
    ("runtime", {"runtime"}),
    ("entry", {"cli", "config.docs", "bench"}),
]
LAYER_OF = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}
# Packages whose modules sit in different layers: each module is a unit of its own ("config.io"). rollarc.config
# holds the frozen-model base and the cluster: section (below everything) beside the training config that
# composes every section, and the reference generated from it (an entry point).
SPLIT_PACKAGES = {"config"}

# Modules that must stay free of Ray and of the runtime (pure maths and wire formats, testable without Ray).
RAY_FREE_PREFIXES = (
    "rollarc.algo",
    "rollarc.policy",
    "rollarc.spotlight",
    "rollarc.sync.codec",
    "rollarc.sync.varint",
    "rollarc.sync.checksum",
    "rollarc.sync.shard",
)
# Only these units may import rollarc.runtime (the orchestration layer and the entry points above it).
RUNTIME_IMPORTERS = {"runtime", "cli", "bench"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, e.g. rollarc.rewards.config
    line: int
    target: str  # the imported module, e.g. rollarc.config.cluster

    def where(self) -> str:
        return f"{self.module} (line {self.line}) imports {self.target}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def unit_of(module: str) -> str:
    """The layering unit of a rollarc module: its subpackage, the top-level module itself, or, in a package of
    ``SPLIT_PACKAGES``, the package's module (``rollarc.config.io`` -> ``config.io``)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] in SPLIT_PACKAGES:
        return f"{parts[1]}.{parts[2]}"
    return parts[1] if len(parts) > 1 else parts[0]


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk_runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node`` except the bodies of ``if TYPE_CHECKING:`` (their ``else`` still runs)."""
    for child in ast.iter_child_nodes(node):
        if _is_type_checking_block(child):
            assert isinstance(child, ast.If)
            for stmt in child.orelse:
                yield stmt
                yield from _walk_runtime_nodes(stmt)
            continue
        yield child
        yield from _walk_runtime_nodes(child)


def _is_rollarc_module(name: str) -> bool:
    path = PACKAGE_ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or path.is_dir()  # runtime/ and train/ are namespace packages


def parse_imports(source: str, module: str, is_package: bool = False) -> list[Import]:
    """Every import ``module`` runs (top-level and function-local; not under ``if TYPE_CHECKING:``)."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in _walk_runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(module, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append(Import(module, node.lineno, target))
            # ``from rollarc.runtime import entry`` imports the submodule rollarc.runtime.entry.
            found += [
                Import(module, node.lineno, f"{target}.{alias.name}")
                for alias in node.names
                if target.split(".")[0] == "rollarc" and _is_rollarc_module(f"{target}.{alias.name}")
            ]
    return found


def imports_of(path: Path) -> list[Import]:
    return parse_imports(path.read_text(), module_name(path), path.name == "__init__.py")


@functools.cache
def all_imports() -> list[Import]:
    return [imp for path in sorted(PACKAGE_ROOT.rglob("*.py")) for imp in imports_of(path)]


def internal(imports: list[Import]) -> list[Import]:
    return [imp for imp in imports if imp.target == "rollarc" or imp.target.startswith("rollarc.")]


def _fail_if(broken: list[str], rule: str) -> None:
    if broken:
        pytest.fail(f"{rule}:\n  " + "\n  ".join(broken), pytrace=False)


def test_every_unit_has_a_layer():
    units = {unit_of(imp.module) for imp in all_imports()} | {
        unit_of(module_name(p)) for p in PACKAGE_ROOT.rglob("*.py")
    }
    _fail_if(
        sorted(u for u in units if u not in LAYER_OF),
        "these rollarc units are in no layer of tests/unit/test_layering.py (add them, and to docs/layering.md)",
    )


def test_imports_go_down_the_layers():
    broken = []
    for imp in internal(all_imports()):
        src, dst = unit_of(imp.module), unit_of(imp.target)
        if src in LAYER_OF and dst in LAYER_OF and LAYER_OF[dst] > LAYER_OF[src]:  # unknown units: test above
            broken.append(
                f"{imp.where()}: layer {LAYERS[LAYER_OF[src]][0]!r} may not import the higher layer "
                f"{LAYERS[LAYER_OF[dst]][0]!r}"
            )
    _fail_if(broken, "upward imports")


def test_pure_modules_import_neither_ray_nor_the_runtime():
    broken = [
        f"{imp.where()}: {imp.module} must stay free of Ray and rollarc.runtime"
        for imp in all_imports()
        if imp.module.startswith(RAY_FREE_PREFIXES)
        and (imp.target.split(".")[0] == "ray" or imp.target.startswith("rollarc.runtime"))
    ]
    _fail_if(broken, "Ray in pure modules")


def test_scheduling_core_imports_only_the_standard_library_and_itself():
    """rollarc.policy is driven alike by Ray, SimPy and plain tests, so it may depend on none of them."""
    broken = [
        f"{imp.where()}: rollarc.policy may import only the standard library and rollarc.policy"
        for imp in all_imports()
        if imp.module.startswith("rollarc.policy")
        and not imp.target.startswith("rollarc.policy")
        and imp.target.split(".")[0] not in sys.stdlib_module_names
        and imp.target != "__future__"
    ]
    _fail_if(broken, "dependencies of the scheduling core")


def test_only_the_orchestration_layer_and_entry_points_import_the_runtime():
    broken = [
        f"{imp.where()}: only {sorted(RUNTIME_IMPORTERS)} may import rollarc.runtime"
        for imp in internal(all_imports())
        if imp.target.startswith("rollarc.runtime") and unit_of(imp.module) not in RUNTIME_IMPORTERS
    ]
    _fail_if(broken, "runtime imported from below")


def test_cluster_planner_does_not_import_the_simulator():
    broken = [
        f"{imp.where()}: rollarc.cluster is below rollarc.sim (sim checks plans, not the reverse)"
        for imp in internal(all_imports())
        if unit_of(imp.module) == "cluster" and unit_of(imp.target) == "sim"
    ]
    _fail_if(broken, "cluster -> sim")


def test_rewards_do_not_import_the_training_config():
    config_layer = LAYERS[LAYER_OF["config"]][1]
    broken = [
        f"{imp.where()}: rollarc.rewards is below the training config (rollarc.config.run imports rewards)"
        for imp in internal(all_imports())
        if unit_of(imp.module) == "rewards" and unit_of(imp.target) in config_layer
    ]
    _fail_if(broken, "rewards -> config")


def function_local_imports(source: str) -> list[tuple[int, list[int]]]:
    """Groups of function-local import statements: (first line, lines of every statement in the group).

    A group is a run of import statements in one function body with nothing but blank lines between them.
    """
    lines = source.splitlines()
    groups: list[tuple[int, list[int]]] = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for body in _statement_lists(func):
            previous_end = None
            for stmt in body:
                if not isinstance(stmt, ast.Import | ast.ImportFrom):
                    previous_end = None
                    continue
                end = stmt.end_lineno or stmt.lineno
                between = lines[previous_end : stmt.lineno - 1] if previous_end is not None else None
                if between is not None and all(not line.strip() for line in between):
                    groups[-1][1].append(stmt.lineno)
                else:
                    groups.append((stmt.lineno, [stmt.lineno]))
                previous_end = end
    return groups


def _statement_lists(func: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every statement list inside ``func`` (its body, and the bodies of its ifs, trys, withs, loops)."""
    for node in ast.walk(func):
        for name in ("body", "orelse", "finalbody"):
            value = getattr(node, name, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                yield handler.body


def test_function_local_imports_say_what_they_defer():
    """An import inside a function is kept only to defer a heavy module; its group's first line says which."""
    broken = []
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for first, group in function_local_imports(source):
            if "# deferred:" not in lines[first - 1]:
                statements = ", ".join(str(n) for n in group)
                broken.append(
                    f"{module_name(path)} (line {statements}): a function-local import without a "
                    "'# deferred: <what is heavy>' comment; hoist it to the top, or say what it defers"
                )
    _fail_if(broken, "function-local imports")


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for imp in internal(all_imports()):
        src, dst = unit_of(imp.module), unit_of(imp.target)
        if src != dst and dst != "rollarc":
            graph.setdefault(src, set()).add(dst)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that starts and ends at the same node, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_no_import_cycles_between_units():
    cycle = find_cycle(_package_graph())
    edges = internal(all_imports())
    broken = []
    if cycle:
        for src, dst in itertools.pairwise(cycle):
            first = next(imp for imp in edges if unit_of(imp.module) == src and unit_of(imp.target) == dst)
            broken.append(f"{src} -> {dst}: e.g. {first.where()}")
    _fail_if(broken, "package-level import cycle")


def test_the_checker_itself_can_fail():
    """Function-local, relative and ``from package import module`` imports are seen; type-only ones are not."""
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import rollarc.config\n"
        "def f():\n    import ray\n    from rollarc.runtime import entry\n"
        "from . import loop\nfrom ..engine import types\n"
    )
    targets = [imp.target for imp in parse_imports(source, "rollarc.agent.probe")]
    assert targets == [
        "typing",
        "ray",
        "rollarc.runtime",
        "rollarc.runtime.entry",
        "rollarc.agent",
        "rollarc.agent.loop",
        "rollarc.engine",
        "rollarc.engine.types",
    ]
    assert [
        unit_of(m) for m in ("rollarc", "rollarc.cli", "rollarc.agent.loop", "rollarc.config", "rollarc.config.io")
    ] == [
        "rollarc",
        "cli",
        "agent",
        "config",
        "config.io",
    ]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None
    source = "def f():\n    import ray  # deferred: Ray\n\n    import json\n    x = 1\n    import os\n"
    assert function_local_imports(source) == [(2, [2, 4]), (6, [6])]
