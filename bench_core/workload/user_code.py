"""Where a model of your own comes from: code:<file.py>:<function> or code:<module>:<function> read,
imported and fingerprinted (the file's sha256, the git commit holding it). The model itself, its checks
and the Task interface are custom.py's.

A model keeps one name across edits of its file (`code:net.py:build`): the file's hash is a column of the
row (model_code_sha256), beside the versions and the commit, a change a history can name. Rows written
before carry it in the name (`code:net.py:build@3f2a1c9d`); model_identity reads them as the same model.

An edited file is read again (a module of its own per content); a module found on the import path (or
under the current folder) is put on PYTHONPATH, so the sweep's kernels and torchrun's workers find it too.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bench_core.errors import ConfigError, error_message, from_outside

PREFIX = "code"
SYNTAX = "code:<file.py>:<function> or code:<module>:<function>"
_loaded: dict[str, str] = {}  # module -> the sha256 of its file when it was imported
# The content hash that rows written before schema 10 appended to a code: model's name.
_OLD_HASH_SUFFIX = re.compile(rf"^({PREFIX}:.+:[A-Za-z_][A-Za-z0-9_]*)@[0-9a-f]{{8}}$")


@dataclass(frozen=True)
class CodeRef:
    """Where a code: model comes from, read once per process."""
    name: str            # canonical: code:<absolute file>:<function> or code:<module>:<function>
    path: Path           # the file whose content is hashed
    function: str
    sha256: str
    commit: str | None   # the git commit of the checkout holding the file; '-dirty' when the file differs from it

    @property
    def shown(self) -> str:
        """How rows name the model: the file (or module) and function. The same across edits of the file:
        its content hash is the row's model_code_sha256, not part of the name."""
        place = self.name.removeprefix(f"{PREFIX}:").rsplit(":", 1)[0]
        place = Path(place).name if place.endswith(".py") else place
        return f"{PREFIX}:{place}:{self.function}"


def model_identity(name):
    """A row's model as one model across edits of its file: `code:net.py:build@3f2a1c9d` (a row written
    before the hash left the name) is `code:net.py:build`; every other value is returned as it is."""
    if isinstance(name, str) and "@" in name:
        found = _OLD_HASH_SUFFIX.match(name)
        return found.group(1) if found else name
    return name


def locate(inner: str) -> tuple[str, str, Path | None]:
    """(where, function, file) of code:<where>:<function>: the file of a path, else None (a module)."""
    where, sep, function = inner.rpartition(":")
    if not sep or not where or not function.isidentifier():
        raise ConfigError("model", f"code:{inner} names no function; expected {SYNTAX} "
                                   "(e.g. code:examples/tiny_segnet.py:build)")
    if not (where.endswith(".py") or os.sep in where or "/" in where):
        return where, function, None
    return where, function, _python_file(where, inner)


def _python_file(where: str, inner: str) -> Path:
    """The file of code:<where>:<function>: readable Python source, or one line saying what is there instead
    (nothing, a folder, another kind of file, a file that cannot be read)."""
    said = f"code:{inner}: "
    try:
        path = Path(where).expanduser().resolve()
        kind = "file" if path.is_file() else "folder" if path.is_dir() else "other" if path.exists() else None
        if kind == "file":  # (never a pipe: reading one would wait)
            with path.open("rb") as source:
                source.read(1)
    except (OSError, ValueError) as exc:  # unreadable, a name too long, a NUL in it
        raise ConfigError("model", said + f"cannot read {where}: {getattr(exc, 'strerror', None) or exc}") from None
    if kind == "file" and path.suffix == ".py":
        return path
    if kind is None:
        raise ConfigError("model", said + f"no such file: {where} (relative paths are from {os.getcwd()})")
    what = {"file": "not a Python file (.py)", "folder": "a folder, not a Python file"}.get(kind, "not a regular file")
    raise ConfigError("model", said + f"{where} is {what}; expected {SYNTAX}")


def load(inner: str, sha256: str | None) -> tuple[CodeRef, Callable]:
    where, function, path = locate(inner)
    if path is not None:
        module = _import_file(path, sha256, inner)
        name = f"{PREFIX}:{path}:{function}"
    else:
        module = _import_module(where, inner)
        path = Path(getattr(module, "__file__", "") or where).resolve()
        name = f"{PREFIX}:{where}:{function}"
    fn = getattr(module, function, None)
    if not callable(fn):
        defined = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__)
        found = f"has no function {function!r}" if fn is None else \
            f"holds {function!r}, but {function!r} in {path.name} is {type(fn).__name__}, not a function"
        raise ConfigError("model", f"code:{inner}: {path.name} {found}; its functions: {', '.join(defined) or 'none'}")
    return CodeRef(name, path, function, sha256_of(path), _commit(path)), fn


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes() if path.is_file() else b"").hexdigest()


def _import_file(path: Path, sha256: str, inner: str):
    # A module of its own per file and content (two files named model.py do not collide; an edited file is
    # read again), its folder on the path for the sibling modules it imports.
    name = f"bench_user_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}_{sha256[:12]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - the user's import, said in one line (a sys.exit() in it too)
        if from_outside(exc):
            raise
        raise ConfigError("model", f"code:{inner}: importing {path.name} raised {error_message(exc)}") from None
    sys.modules[name] = module
    return module


def on_path() -> None:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _import_module(where: str, inner: str):
    on_path()
    try:
        module = importlib.import_module(where)
        if getattr(module, "__file__", None) and _loaded.setdefault(where, sha256_of(Path(module.__file__))) != \
                sha256_of(Path(module.__file__)):
            module = importlib.reload(module)  # edited since it was imported (a notebook's user changed it)
            _loaded[where] = sha256_of(Path(module.__file__))
    except ModuleNotFoundError as exc:
        if exc.name and where.startswith(exc.name):
            raise ConfigError("model", f"code:{inner}: no module {where!r} on the import path or in "
                                       f"{os.getcwd()}; expected {SYNTAX}") from None
        raise ConfigError("model", f"code:{inner}: importing {where} raised {error_message(exc)}") from None
    except BaseException as exc:  # noqa: BLE001 - the user's import, said in one line (a sys.exit() in it too)
        if from_outside(exc):
            raise
        raise ConfigError("model", f"code:{inner}: importing {where} raised {error_message(exc)}") from None
    # Children (the sweep's kernels, torchrun's workers) start elsewhere: they find the module where we did.
    root = Path(module.__file__).resolve().parents[where.count(".")] if getattr(module, "__file__", None) else None
    if root and str(root) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    return module


def _commit(path: Path) -> str | None:
    def git(*args):
        done = subprocess.run(["git", "-C", str(path.parent), *args], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() if done.returncode == 0 else None
    try:
        commit = git("rev-parse", "HEAD")
        changed = commit and git("status", "--porcelain", "--", path.name)
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{commit}-dirty" if changed else commit
