"""The house: bench_core's imports point one way along the flow (docs.LAYOUT), with no cycles, no
imports hidden in functions beyond a short allow-list, no private names borrowed across modules,
and no module too long to read. Read with ast from the source; nothing is imported to check."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bench_core.docs import LAYOUT

PACKAGE = Path(__file__).resolve().parents[1] / "bench_core"
MAX_LINES = 420

# Imports of bench_core made inside a function, each with the reason it must stay there.
# (importing module, imported module)
ALLOWED_IN_FUNCTION = {
    # `import bench_core` (and so `from bench_core import BenchConfig` in a notebook) loads no
    # torch: the runner is imported when run_benchmark is first called.
    ("bench_core", "bench_core.launch.dispatch"),
    # Notebooks written before the restructuring say `from bench_core import notebook`; the
    # package face still answers it, importing the module (and torch) only when asked.
    ("bench_core", "bench_core.sweep.notebook"),
    # The model declarations are plain data that config validates names against; the 3D UNet is
    # torch code, imported only when that model is built.
    ("bench_core.workload.volumetric", "bench_core.workload.unet3d"),
    # Generation subclasses transformers' StoppingCriteria (torch and transformers code): imported
    # only when a generate workload is made.
    ("bench_core.workload.text", "bench_core.workload.generation"),
    # The same, for a speech model's generate workload.
    ("bench_core.workload.speech", "bench_core.workload.generation"),
    # The DLRM network is torch code (nn.Module subclasses): imported only when a recommendation model is built.
    ("bench_core.workload.recommendation", "bench_core.workload.dlrm"),
    # The report command's module (pandas, scipy, matplotlib: 0.7 s), imported by bench sweep only when
    # it makes a report: every sweep and SLURM task started that much later, --no-report or not.
    ("bench_core.cli.sweep", "bench_core.summary.report"),
    # Mode serve's own module and its HTTP client (aiohttp): 0.3-0.5 s of every kernel's and bench process's
    # start, where most never serve.
    ("bench_core.launch.dispatch", "bench_core.launch.engine_server"),
    # The Memory table estimates again the rows recorded before the step was traced (the kept GPU runs): the
    # estimator is torch code, imported only for a report with such rows, not by every report's kernel.
    ("bench_core.summary.memory_table", "bench_core.run.memory_estimate"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(node: ast.AST, importer: str) -> list[tuple[str, list[str]]]:
    """(module, names) that an import statement takes from bench_core."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names if a.name.split(".")[0] == "bench_core"]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "bench_core":
        out = []
        for alias in node.names:
            full = f"{node.module}.{alias.name}"
            out.append((full, []) if full in MODULES else (node.module, [alias.name]))
        return out
    assert not (isinstance(node, ast.ImportFrom) and node.level), f"{importer}: use absolute imports"
    return []


def edges() -> list[tuple[str, str, int, bool, list[str]]]:
    """(importer, imported, line, inside a function, names) for every bench_core import."""
    found = []
    for name, path in MODULES.items():
        def walk(node, in_function):
            for child in ast.iter_child_nodes(node):
                for target, names in imported(child, name):
                    if target != name:
                        found.append((name, target, child.lineno, in_function, names))
                walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
        walk(ast.parse(path.read_text()), False)
    return found


def part(module: str) -> str:
    """The part of docs.LAYOUT a module belongs to ('' for the package face itself)."""
    name = module.split(".")[1] if "." in module else ""
    return "cli" if name == "__main__" else name


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_import_graph_has_no_cycle():
    # The package face `bench_core` hands out __version__ and the public names; the parts may take
    # __version__ from it, so it is left out of the graph (its own imports are the allow-list's).
    graph: dict[str, set[str]] = {}
    for importer, target, _, _, _ in edges():
        if importer != "bench_core" and target != "bench_core":
            graph.setdefault(importer, set()).add(target)
    found = cycle(graph)
    assert found is None, "import cycle: " + " -> ".join(found)


def test_imports_point_down_the_flow():
    assert set(LAYOUT) == {part(m) for m in MODULES if part(m)}, "docs.LAYOUT must list every part of bench_core"
    order = {name: index for index, name in enumerate(LAYOUT)}
    upward = [f"{a} -> {b} (line {line})" for a, b, line, _, _ in edges()
              if part(a) and part(b) and part(a) != part(b) and order[part(b)] > order[part(a)]]
    assert not upward, "imports against the flow of docs.LAYOUT: " + "; ".join(upward)


def test_no_bench_core_import_hides_in_a_function_unless_allowed():
    inner = {(a, b): line for a, b, line, in_function, _ in edges() if in_function}
    assert len(ALLOWED_IN_FUNCTION) <= 10
    hidden = [f"{a} -> {b} (line {line})" for (a, b), line in inner.items() if (a, b) not in ALLOWED_IN_FUNCTION]
    assert not hidden, "bench_core imports inside functions (move them to the top, or allow one with a reason): " \
                       + "; ".join(hidden)
    stale = sorted(ALLOWED_IN_FUNCTION - set(inner))
    assert not stale, f"allow-list entries that no longer exist: {stale}"


def test_no_private_name_is_imported_across_modules():
    private = [f"{a} imports {n} from {b} (line {line})" for a, b, line, _, names in edges()
               for n in names if n.startswith("_") and n != "__version__"]
    assert not private, "; ".join(private)


def test_every_module_says_its_job_and_stays_short():
    long = {name: len(path.read_text().splitlines()) for name, path in MODULES.items()}
    assert not {n: c for n, c in long.items() if c > MAX_LINES}, f"modules over {MAX_LINES} lines"
    silent = [name for name, path in MODULES.items()
              if path.name != "__main__.py" and not ast.get_docstring(ast.parse(path.read_text()))]
    assert not silent, f"modules without a docstring: {silent}"


# Every module of the report's kernel: a torch import there cost each report 2 s of CPU.
REPORT_MODULES = ", ".join(f"bench_core.summary.{p.stem}" for p in sorted((PACKAGE / "summary").glob("*.py"))
                           if p.stem != "__init__")


# The History section is drawn in the same kernel (notebooks/summary.ipynb) from bench_core.history.
HISTORY_MODULES = ", ".join(f"bench_core.history.{p.stem}" for p in sorted((PACKAGE / "history").glob("*.py"))
                            if p.stem != "__init__")


@pytest.mark.parametrize("modules", ["bench_core", "bench_core.results, bench_core.config",
                                     "bench_core.summary", REPORT_MODULES, HISTORY_MODULES])
def test_plain_data_modules_import_no_torch(modules):
    code = f"import sys, {modules}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", f"import {modules} loads torch"


POSIX_ONLY = {"fcntl", "resource", "termios", "pwd", "grp", "pty", "tty"}


def test_no_posix_only_module_is_imported_unguarded_at_the_top():
    # At the top of a module, a POSIX-only import must sit in a try/except ImportError; inside a
    # function it runs only where that function is called (and is guarded there too).
    unguarded = []
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                unguarded += [f"{name}: {m} (line {node.lineno})" for m in found if m.split(".")[0] in POSIX_ONLY]
    assert not unguarded, unguarded


BLOCKED = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"fcntl", "resource"}:
            raise ImportError(f"{name} is blocked (as on Windows)")
sys.meta_path.insert(0, Block())
for name in ("fcntl", "resource"):
    sys.modules.pop(name, None)
import bench_core, bench_core.files, bench_core.results, bench_core.config, bench_core.summary
from bench_core.files import locked
import tempfile, pathlib
with locked(pathlib.Path(tempfile.mkdtemp())):
    print("imported and locked without fcntl and resource")
"""


def test_the_package_imports_and_locks_without_fcntl_and_resource():
    # (filelock falls back to its soft lock here and warns; on Windows it uses msvcrt instead)
    out = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "imported and locked without fcntl and resource" in out.stdout


def test_importing_the_package_warns_of_nothing():
    subprocess.run([sys.executable, "-W", "error", "-c", "import bench_core, bench_core.cli"], check=True)


# A newcomer's first commands: `--help`, and a value the configuration refuses, answered without loading torch
# (`bench run --help` took 4.5 s of a 2-core Zen 3, `bench sweep --help` 4.3 s, before their flags lived apart from
# the commands' modules, 0.4 s after; find-batch, compare and ladder 3-5 s before).
# Counted by the modules the process loaded, not timed.
TORCH_FREE_COMMANDS = [["--help"], ["run", "--help"], ["run", "--model", "resnet5O"], ["run", "--batch-size", "0"],
                       ["run", "--precision", "fp64"], ["run", "--mode", "serve", "--model", "resnet18"],
                       ["sweep", "--help"], ["report", "--help"], ["predict", "--help"], ["diff", "--help"],
                       ["history", "--help"], ["find-batch", "--help"], ["find-batch", "--batch-size", "0"],
                       ["find-batch", "--steps", "5"], ["compare", "--help"], ["compare", "--repeats", "3"],
                       ["ladder", "--help"]]


def test_help_and_a_refused_configuration_load_no_torch():
    code = f"""import contextlib, io, sys
from bench_core.cli import main
for argv in {TORCH_FREE_COMMANDS!r}:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    said = (out.getvalue() + err.getvalue()).strip().splitlines()
    print(repr(argv), code, 'torch' in sys.modules, said[-1] if code else said[0])
"""
    lines = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(lines) == len(TORCH_FREE_COMMANDS)
    for argv, line in zip(TORCH_FREE_COMMANDS, lines):
        if argv[-1] == "--help":
            assert line.startswith(f"{argv!r} 0 False usage: bench"), line
        else:  # bad input: exit 2, one line naming the field, and still no torch
            field = {"resnet5O": "model", "0": "batch_size", "fp64": "precision", "resnet18": "mode", "5": "steps",
                     "3": "repeats"}[argv[-1]]
            assert line.startswith(f"{argv!r} 2 False bench {argv[0]}: error: {field}: "), line
