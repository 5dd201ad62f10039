"""notebook-bench: reproducible deep-learning training and inference benchmarks."""
__version__ = "0.1.0"

from bench_core.config.schema import BenchConfig  # noqa: E402
from bench_core.errors import ConfigError  # noqa: E402
from bench_core.workload.custom import UserModel  # noqa: E402


def run_benchmark(cfg, progress=None):
    """Run one BenchConfig and return its result rows (see bench_core.launch.dispatch)."""
    # Imported here so that `import bench_core` (and its plain-data modules) loads no torch.
    from bench_core.launch.dispatch import run_benchmark as _run
    return _run(cfg, progress)


def __getattr__(name):
    """`from bench_core import notebook`, as notebooks made before the sweep/ package say it."""
    if name == "notebook":
        from bench_core.sweep import notebook
        return notebook
    raise AttributeError(f"module 'bench_core' has no attribute {name!r}")


__all__ = ["BenchConfig", "ConfigError", "UserModel", "run_benchmark", "__version__"]
