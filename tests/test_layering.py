"""The kit's packages stand on each other one way:

    kernel_runtime  <-  kernels  <-  reference  <-  model_runtime  <-  generation, training
                    <-  gpt2, gptj, wav2vec2  <-  grading  <-  benchmarks

A package imports only packages below it, counting `import` statements anywhere in
a module (inside functions too) and importlib.import_module calls whose name starts
with a literal (reference reaches kernels only that way: by the module names its
specs give). So the graph has no cycle, and an editor can follow every edge. Packages
of one level stand side by side, neither importing the other: generation and training,
and the model families, which share model_runtime, generation and training and import
nothing of each other's. model_runtime's family registry (model_runtime/families.py)
is the one module that imports by a name it builds: each family's entry, from the
packages its FAMILY_PACKAGES lists, which make the family level here. So a command in a
family's package (python -m gpt2 runs any family) reaches the others through the
registry only. The grader's leaderboard runs the whole GPT-2 model, so grading stands
on the families.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from model_runtime.families import FAMILY_PACKAGES

ROOT = Path(__file__).parents[1]
LAYERS = [["kernel_runtime"], ["kernels"], ["reference"], ["model_runtime"], ["generation", "training"],
          list(FAMILY_PACKAGES), ["grading"], ["benchmarks"]]
LEVEL = {package: level for level, packages in enumerate(LAYERS) for package in packages}
REGISTRY = ROOT / "model_runtime" / "families.py"


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports, statically or through importlib with a literal name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            name = node.args[0] if node.args else None
            if isinstance(name, ast.JoinedStr) and name.values and isinstance(name.values[0], ast.Constant):
                name = name.values[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found.add(name.value.split(".")[0])
            elif path != REGISTRY:  # the registry's names are its FAMILY_PACKAGES: the family level
                raise AssertionError(f"{path}: import_module of a name that does not start with a literal")
    return found & set(LEVEL)


def edges() -> dict[str, set[str]]:
    graph = {package: set() for package in LEVEL}
    for package in LEVEL:
        for path in (ROOT / package).rglob("*.py"):
            graph[package] |= imported_packages(path) - {package}
    return graph


def test_packages_import_only_packages_below_them():
    upward = [(a, b) for a, targets in edges().items() for b in targets if LEVEL[b] >= LEVEL[a]]
    assert not upward, f"imports against the layering (package -> package it imports): {upward}"


def test_no_family_imports_another():
    crossing = [(a, b) for a in FAMILY_PACKAGES for b in edges()[a] if b in FAMILY_PACKAGES]
    assert not crossing, f"a family importing another (package -> package it imports): {crossing}"


def test_reference_reaches_kernels_through_the_registry_only():
    users = [p.relative_to(ROOT).as_posix() for p in (ROOT / "reference").rglob("*.py") if "kernels" in imported_packages(p)]
    assert users == ["reference/registry.py"]


def test_the_graph_has_no_cycle():
    graph, order = edges(), []
    while graph:
        leaves = [p for p, targets in graph.items() if not targets - set(order)]
        assert leaves, f"a cycle among {sorted(graph)}"
        order += sorted(leaves)
        graph = {p: t for p, t in graph.items() if p not in leaves}
    assert order.index("kernel_runtime") < order.index("kernels") < order.index("reference") < order.index("gpt2")


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "kernels").glob("*.py") if p.stem != "__init__"))
def test_importing_a_kernel_module_loads_nothing_above_the_runtime(module):
    code = ("import sys, kernels." + module + "\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'model_runtime', 'generation', 'gptj', 'wav2vec2',"
            " 'gpt2', 'reference', 'grading', 'benchmarks'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
