"""The kit's packages (gpt2kit's subpackages) stand on each other one way:

    kernel_runtime  <-  kernels  <-  reference  <-  model_runtime  <-  generation, training
                    <-  gpt2, gptj, wav2vec2  <-  grading  <-  benchmarks

A package imports only packages below it, counting `import` statements anywhere in
a module (inside functions too) and importlib.import_module calls whose name starts
with a literal (reference reaches kernels only that way: by the module names its
specs give). So the graph has no cycle, and an editor can follow every edge. Packages
of one level stand side by side, neither importing the other: generation and training,
and the model families, which share model_runtime, generation and training and import
nothing of each other's. model_runtime's family registry (gpt2kit/model_runtime/families.py)
is the one module that imports by a name it builds: each family's entry, from the
packages its FAMILY_PACKAGES lists, which make the family level here. So a command in a
family's package (python -m gpt2kit runs any family) reaches the others through the
registry only. The grader's leaderboard runs the whole GPT-2 model, so grading stands
on the families.

A package is a folder at the checkout's top (kernels/, gpt2/, ...) or in gpt2kit/
(kernel_runtime/, ...), and imports the others as gpt2kit.<package>: a module that imports
one by its bare name would find it in a checkout and not in an installed wheel.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2kit.model_runtime.families import FAMILY_PACKAGES

ROOT = Path(__file__).parents[1]
LAYERS = [["kernel_runtime"], ["kernels"], ["reference"], ["model_runtime"], ["generation", "training"],
          list(FAMILY_PACKAGES), ["grading"], ["benchmarks"]]
LEVEL = {package: level for level, packages in enumerate(LAYERS) for package in packages}
REGISTRY = ROOT / "gpt2kit" / "model_runtime" / "families.py"


def places(package: str) -> list[Path]:
    """Where `package` is: a folder at the checkout's top, or in gpt2kit/ (one of them)."""
    return [place / package for place in (ROOT, ROOT / "gpt2kit") if (place / package).is_dir()]


def folder(package: str) -> Path:
    return places(package)[0]


def imported_names(path: Path) -> set[str]:
    """The modules a module imports, statically or through importlib with a name that starts with a literal (that
    literal: a package's name and a dot, at least)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found |= {node.module} if node.module != "gpt2kit" else {f"gpt2kit.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            name = node.args[0] if node.args else None
            if isinstance(name, ast.JoinedStr) and name.values and isinstance(name.values[0], ast.Constant):
                name = name.values[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                found.add(name.value)
            elif path != REGISTRY and not path.is_relative_to(ROOT / "tests"):  # the registry's names are its
                # FAMILY_PACKAGES (the family level); the tests' are the modules they test
                raise AssertionError(f"{path}: import_module of a name that does not start with a literal")
    return found


def imported_packages(path: Path) -> set[str]:
    """The kit's packages a module imports (gpt2kit.<package>...)."""
    return {name.split(".")[1] for name in imported_names(path) if name.startswith("gpt2kit.")} & set(LEVEL)


def modules() -> dict[str, list[Path]]:
    """Each package's modules."""
    return {package: sorted(folder(package).rglob("*.py")) for package in LEVEL}


def edges() -> dict[str, set[str]]:
    return {package: set().union(*(imported_packages(path) for path in paths)) - {package}
            for package, paths in modules().items()}


def test_every_package_is_in_one_place():
    found = {package: places(package) for package in LEVEL}
    assert all(len(paths) == 1 for paths in found.values()), found


def test_no_module_imports_a_package_by_its_bare_name():
    paths = [*(path for paths in modules().values() for path in paths), *(ROOT / "tests").rglob("*.py")]
    bare = [(path.relative_to(ROOT).as_posix(), name) for path in paths for name in imported_names(path)
            if name.split(".")[0] in LEVEL]
    assert not bare, f"imports outside gpt2kit (module, name): {bare}"


def test_packages_import_only_packages_below_them():
    upward = [(a, b) for a, targets in edges().items() for b in targets if LEVEL[b] >= LEVEL[a]]
    assert not upward, f"imports against the layering (package -> package it imports): {upward}"


def test_no_family_imports_another():
    crossing = [(a, b) for a in FAMILY_PACKAGES for b in edges()[a] if b in FAMILY_PACKAGES]
    assert not crossing, f"a family importing another (package -> package it imports): {crossing}"


def test_reference_reaches_kernels_through_the_registry_only():
    users = [p.relative_to(ROOT).as_posix() for p in modules()["reference"] if "kernels" in imported_packages(p)]
    assert users == ["reference/registry.py"]


def test_the_graph_has_no_cycle():
    graph, order = edges(), []
    while graph:
        leaves = [p for p, targets in graph.items() if not targets - set(order)]
        assert leaves, f"a cycle among {sorted(graph)}"
        order += sorted(leaves)
        graph = {p: t for p, t in graph.items() if p not in leaves}
    assert order.index("kernel_runtime") < order.index("kernels") < order.index("reference") < order.index("gpt2")


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "kernels").glob("*.py")))
def test_importing_a_kernel_module_loads_nothing_above_the_runtime(module):
    code = ("import sys, gpt2kit.kernels." + module + "\n"
            "print(sorted({'.'.join(m.split('.')[:2]) for m in sys.modules} & {'gpt2kit.model_runtime', "
            "'gpt2kit.generation', 'gpt2kit.gptj', 'gpt2kit.wav2vec2', 'gpt2kit.gpt2', 'gpt2kit.reference', "
            "'gpt2kit.grading', 'gpt2kit.benchmarks'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
