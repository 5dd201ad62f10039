# Sourced by gpu/acceptance.sh and gpu/compare.sh on a machine where this checkout is not installed (a lent GPU
# machine with no network): installs the carried wheels (.whl/, from `make gpu-wheels`) into a folder of their
# own, puts it and this checkout on the import path, and checks that every package a run needs imports.
# Sets PY. Environment: PYTHON (default python3), WHEELS (default .whl), SITE (where they are installed, default
# /tmp/notebook-bench-site). Returns 3 when the install or an import fails.
PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/notebook-bench-site}

if compgen -G "$WHEELS/*.whl" >/dev/null; then
    echo "== install: $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE (no network)"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$WHEELS"/*.whl || { echo "gpu/site.sh: installing the wheels from $WHEELS failed" >&2; return 3; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    # nbconvert's templates and ipykernel's kernel spec are data files: Jupyter looks for them here.
    export JUPYTER_PATH="$SITE/share/jupyter${JUPYTER_PATH:+:$JUPYTER_PATH}"
    export PATH="$SITE/bin:$PATH"
fi
# This checkout itself, uninstalled: bench_core from the working tree.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

"$PY" - <<'PYEOF' || { echo "gpu/site.sh: a package the run needs does not import (above)" >&2; return 3; }
import importlib, sys
missing = []
for name in ("bench_core", "torch", "papermill", "nbclient", "nbconvert", "ipykernel", "itables", "pandas",
             "seaborn", "yaml", "psutil", "filelock", "httpx", "prometheus_client"):
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        missing.append(f"{name} ({type(exc).__name__}: {exc})")
print("== imports:", "; ".join(missing) if missing else "all found", f"(python {sys.version.split()[0]})")
sys.exit(1 if missing else 0)
PYEOF
