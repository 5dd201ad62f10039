"""The wheel, environment.yml and the Dockerfile.

The wheel is built for real (pip, no build isolation) and installed into a folder: it holds
every file of bench_core/, the two notebooks and the data, setuptools says nothing to warn
about, and the installed package finds its own notebooks with the checkout out of sight.
No conda solver and no Docker engine run here: the other tests read the files and check that
they agree with pyproject.toml and promise what the README says (pinned base image, `bench`
entry point, non-root user, no secrets, outputs under /workdir/outputs).
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]

# conda-forge names of packages whose PyPI name differs.
CONDA_TO_PYPI = {"pytorch": "torch", "matplotlib-base": "matplotlib", "nbconvert-core": "nbconvert",
                 "seaborn-base": "seaborn", "pytorch-gpu": "torch", "pytorch-cpu": "torch"}
# In environment.yml on purpose, with no pyproject.toml counterpart.
ENV_ONLY = {"python", "pip", "cuda-version"}


def normalise(name: str) -> str:
    """PEP 503 name: case-insensitive, runs of - _ . are one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def runtime_requirements() -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in pyproject()["project"]["dependencies"]]
    return {normalise(r.name): r for r in reqs}


def extra_names() -> set[str]:
    extras = pyproject()["project"].get("optional-dependencies", {})
    return {normalise(Requirement(r).name) for reqs in extras.values() for r in reqs}


def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def conda_specs() -> list[str]:
    return [d for d in environment()["dependencies"] if isinstance(d, str)]


def pip_specs() -> list[str]:
    sections = [d["pip"] for d in environment()["dependencies"] if isinstance(d, dict) and "pip" in d]
    return [spec for section in sections for spec in section]


def conda_name(spec: str) -> str:
    return re.match(r"[A-Za-z0-9_.\-]+", spec.strip()).group(0)


def lower_bound(spec: str) -> Version | None:
    """The `>=` bound of a conda or pip spec (`name >=1.2,<2`, `name[version='>=1.2']`)."""
    found = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", spec)
    return Version(found.group(1)) if found else None


def env_packages() -> dict[str, str]:
    """PyPI name -> spec, for every package environment.yml installs by name."""
    packages = {}
    for spec in conda_specs():
        name = normalise(conda_name(spec))
        packages[normalise(CONDA_TO_PYPI.get(name, name))] = spec
    for spec in pip_specs():
        if spec.startswith("-"):
            continue  # options and the editable project itself
        packages[normalise(Requirement(spec).name)] = spec
    return packages


# -- environment.yml ------------------------------------------------------------------------

def test_environment_uses_conda_forge_not_the_retired_pytorch_channel():
    env = environment()
    assert env["channels"][0] == "conda-forge"
    assert not {"pytorch", "nvidia", "pytorch-nightly"} & set(env["channels"]), env["channels"]
    names = {conda_name(s) for s in conda_specs()}
    assert "pytorch-cuda" not in names and "cudatoolkit" not in names and "cpuonly" not in names
    assert "pytorch" in names and "cuda-version" in names


def test_environment_python_is_311_and_allowed_by_pyproject():
    python = next(s for s in conda_specs() if conda_name(s) == "python")
    assert re.fullmatch(r"python\s*=\s*3\.11(\.\*)?", python), python
    requires = pyproject()["project"]["requires-python"]
    from packaging.specifiers import SpecifierSet
    assert Version("3.11") in SpecifierSet(requires)


def test_environment_pytorch_is_the_cuda_build():
    spec = next(s for s in conda_specs() if conda_name(s) == "pytorch")
    build = re.search(r"build\s*=\s*'([^']*)'", spec)
    assert build and build.group(1).startswith("cuda"), \
        f"conda-forge installs its cpu build unless the cuda build is asked for: {spec}"


def test_environment_installs_the_project_editable_with_tests():
    assert "-e .[test]" in pip_specs()


def test_every_runtime_dependency_is_in_environment():
    env = env_packages()
    missing = sorted(set(runtime_requirements()) - set(env))
    assert not missing, f"in pyproject.toml [project] dependencies but not in environment.yml: {missing}"


def test_environment_bounds_are_not_looser_than_pyproject():
    env = env_packages()
    for name, req in runtime_requirements().items():
        wanted = lower_bound(str(req.specifier))
        have = lower_bound(env[name])
        if wanted is not None:
            assert have is not None and have >= wanted, \
                f"{name}: pyproject.toml wants {req.specifier}, environment.yml has {env[name]!r}"


def test_environment_has_nothing_pyproject_does_not_know():
    known = set(runtime_requirements()) | extra_names() | {normalise(n) for n in ENV_ONLY}
    unknown = sorted(set(env_packages()) - known)
    assert not unknown, f"in environment.yml but in no pyproject.toml dependency list: {unknown}"


# -- Dockerfile -------------------------------------------------------------------------------

def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs; comments dropped, continuation lines joined."""
    instructions, current = [], ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if current and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        keyword, _, rest = current.strip().partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        current = ""
    assert not current, "Dockerfile ends inside a continued line"
    return instructions


def assignments(args: str) -> dict[str, str]:
    """KEY=value pairs of an ENV or ARG line (`ARG NAME` alone has an empty value)."""
    pairs = {}
    for token in shlex.split(args):
        key, _, value = token.partition("=")
        pairs[key] = value
    return pairs


def build_args() -> dict[str, str]:
    values = {}
    for keyword, args in dockerfile():
        if keyword in ("ARG", "ENV"):
            values.update(assignments(args))
    return values


def expand(text: str) -> str:
    values = build_args()
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), text)


def only(keyword: str) -> list[str]:
    return [args for kw, args in dockerfile() if kw == keyword]


def shell_commands() -> list[list[str]]:
    """Every command of every RUN, as shell words (split at && and ;, subshell parentheses dropped)."""
    commands = []
    for run in only("RUN"):
        lexer = shlex.shlex(run, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words: list[str] = []
        for token in lexer:
            if token in ("&&", ";", "||", "(", ")", "|"):
                if words:
                    commands.append(words)
                words = []
            else:
                words.append(token)
        if words:
            commands.append(words)
    return commands


def commands_of(*program: str) -> list[list[str]]:
    """The commands that start with `program` (e.g. 'apt-get', 'install'), with any flags between."""
    found = []
    for words in shell_commands():
        plain = [w for w in words if not w.startswith("-")]
        if plain[:len(program)] == list(program):
            found.append(words)
    return found


def test_base_image_is_a_pinned_cuda_pytorch_tag():
    froms = only("FROM")
    assert len(froms) == 1, froms
    image = expand(froms[0].split()[0])
    repo, _, tag = image.partition(":")
    assert repo == "pytorch/pytorch", image
    assert tag and tag != "latest" and re.match(r"\d+\.\d+\.\d+-cuda\d+\.\d+-cudnn\d+-runtime$", tag), image
    torch_version = Version(tag.split("-")[0])
    wanted = runtime_requirements()["torch"].specifier
    assert torch_version in wanted, f"base image torch {torch_version} does not satisfy pyproject {wanted}"
    assert torch_version >= Version("2.9"), "the CUDA backend uses torch.backends.*.fp32_precision (2.9+)"


def test_a_c_compiler_for_triton_is_installed():
    # torch.compile on a GPU runs Triton, which compiles with the system C compiler at run time;
    # the -runtime base has none.
    installed = {w for words in commands_of("apt-get", "install") for w in words[2:] if not w.startswith("-")}
    assert "gcc" in installed, installed
    assert all("-y" in words for words in commands_of("apt-get", "install")), "a build cannot answer prompts"


def test_entrypoint_is_bench_with_a_default_sweep():
    import json
    assert [json.loads(a) for a in only("ENTRYPOINT")] == [["bench"]]
    cmd = json.loads(only("CMD")[-1])
    assert cmd[0] == "sweep" and "--out" in cmd
    out = cmd[cmd.index("--out") + 1]
    assert out.startswith("outputs/") or out.startswith("/workdir/outputs/"), out


def test_workdir_outputs_and_environment():
    assert only("WORKDIR") == ["/workdir"]
    env = {}
    for args in only("ENV"):
        env.update(assignments(args))
    assert env["MPLBACKEND"] == "Agg"
    assert expand(env["BENCH_GIT_COMMIT"]) == build_args()["BENCH_GIT_COMMIT"], \
        "the BENCH_GIT_COMMIT build arg must reach the environment (environment.git_commit reads it)"
    assert any("/workdir/outputs" in v for v in only("VOLUME")), "outputs are meant to be mounted"
    assert "8888" in " ".join(only("EXPOSE")), "JupyterLab's port"


def test_runs_as_a_non_root_user_that_owns_the_outputs():
    users = only("USER")
    assert users, "the image must not run as root"
    user = expand(users[-1]).split(":")[0]
    assert user not in ("root", "0") and user.isdigit() and int(user) >= 1000, user
    instructions = dockerfile()
    last_user = max(i for i, (kw, _) in enumerate(instructions) if kw == "USER")
    assert not any(kw == "RUN" for kw, _ in instructions[last_user:]), "RUN after USER would run as the user"
    owned = {w for words in commands_of("chown") for w in words[2:]}
    assert "/workdir/outputs" in owned, "the container user must own the outputs folder"
    home = build_args()["HOME"]
    assert any(words[1:] == ["1777", home] for words in commands_of("chmod")), "a writable HOME for any --user uid"


def test_no_secrets_in_env_or_args():
    secret = re.compile(r"PASSWORD|PASSWD|TOKEN|SECRET|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY", re.I)
    for keyword, args in dockerfile():
        if keyword in ("ENV", "ARG"):
            for key, value in assignments(args).items():
                assert not (secret.search(key) and value), f"{keyword} {key} carries a value"
    text = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"--(NotebookApp|ServerApp|IdentityProvider)\.token", text), "Jupyter keeps its token"


def test_pip_installs_are_pinned_or_the_project():
    installs = commands_of("pip", "install")
    assert installs, "the project is installed with pip"
    takes_value = {"-c", "--constraint", "-r", "--requirement", "-e", "--editable", "--index-url", "--extra-index-url"}
    editable = []
    for words in installs:
        tokens = words[words.index("install") + 1:]
        for i, token in enumerate(tokens):
            after = tokens[i - 1] if i else ""
            if after in ("-e", "--editable"):
                assert token.startswith("."), f"editable install of something else: {token}"
                editable.append(token)
            elif after in takes_value or token.startswith("-"):
                continue
            else:
                assert token.startswith(".") or "==" in token, f"unpinned pip install: {token!r} in {words}"
    assert ".[lab]" in editable, "JupyterLab comes with the lab extra"


def test_base_image_torch_is_kept_and_a_kernel_is_registered():
    for words in commands_of("pip", "install"):
        options = {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i] in ("-c", "--constraint")}
        assert options, f"pip must not replace the image's CUDA torch: no constraint in {words}"
    kernels = [w for w in shell_commands() if w[:4] == ["python", "-m", "ipykernel", "install"]]
    assert kernels and ("--sys-prefix" in kernels[0] or "--user" in kernels[0]), "papermill needs a kernelspec"


def test_copied_sources_exist_and_are_not_dockerignored():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    for required in (".git", ".venv", "outputs"):
        assert required in ignored, f".dockerignore must exclude {required}"
    for args in only("COPY"):
        parts = [p for p in args.split() if not p.startswith("--")]
        for source in parts[:-1]:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
            assert source not in ignored, f"COPY {source} but .dockerignore excludes it"
    copied = " ".join(only("COPY"))
    for needed in ("pyproject.toml", "README.md", "bench_core", "notebooks", "params"):
        assert needed in copied, f"the image needs {needed} (README.md: pyproject's readme)"


# -- the wheel --------------------------------------------------------------------------------

# Not copied into the build folder: local state, none of it part of a source distribution.
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", "outputs", "build", "dist", "*.egg-info", "__pycache__",
                                     "*.pyc", ".pytest_cache", ".hypothesis", ".ruff_cache", ".ipynb_checkpoints")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str, str]:
    """`pip wheel .` (no build isolation, no dependencies), its verbose log and the commit it was
    built from. It builds in a copy of the checkout (setuptools writes build/ and *.egg-info where it
    builds), made a git repository of one commit, as a clone is."""
    tmp = tmp_path_factory.mktemp("wheel")
    source, dist = tmp / "source", tmp / "dist"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    git = ["git", "-C", str(source), "-c", "user.name=test", "-c", "user.email=test@example.com"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-gpg-sign", "-m", "the source of the wheel"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=60)
    commit = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], check=True, capture_output=True, text=True,
                            timeout=60).stdout.strip()
    # PYTHONDONTWRITEBYTECODE (set by some shells and CI images) makes setuptools warn that it
    # skips byte-compiling: a fact about the environment, not the project.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "BENCH_GIT_COMMIT")}
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "-w", str(dist), "--no-deps",
                            "--no-build-isolation", "-v", "--disable-pip-version-check"],
                           cwd=source, env=env, capture_output=True, text=True, timeout=300)
    log = build.stdout + build.stderr
    assert build.returncode == 0, log[-3000:]
    wheels = list(dist.glob("notebook_bench-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0], log, commit


def test_wheel_holds_every_file_of_the_package_the_notebooks_and_the_data(wheel):
    names = set(zipfile.ZipFile(wheel[0]).namelist())
    package = ROOT / "bench_core"
    sources = [p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    missing = sorted(str(p.relative_to(ROOT)) for p in sources if str(p.relative_to(ROOT)) not in names)
    assert not missing, f"in bench_core/ but not in the wheel (pyproject.toml packages / package-data): {missing}"
    for notebook in ("benchmark.ipynb", "summary.ipynb"):
        assert f"bench_core/notebooks/{notebook}" in names
    assert {"bench_core/data/gpu_peaks.csv", "bench_core/data/reference.csv"} <= names
    assert not any(name.startswith(("notebooks/", "tests/", "params/")) for name in names), \
        "only bench_core at the top of the wheel"


def test_wheel_builds_without_setuptools_warnings(wheel):
    warnings = [line.strip() for line in wheel[1].splitlines() if re.search(r"warn", line, re.I)]
    assert not warnings, warnings


def install_wheel(wheel: Path, target: Path) -> Path:
    """The wheel installed (not editable, no dependencies) into the folder `target`."""
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q",
                              "--disable-pip-version-check", "--target", str(target), str(wheel)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    return target


def test_installed_wheel_finds_its_own_notebooks(wheel, tmp_path):
    """Installed (not editable) into a folder, with the checkout nowhere on the path: `bench sweep`'s
    template and `bench report`'s summary notebook are the files inside the installed package."""
    target = install_wheel(wheel[0], tmp_path / "site")
    probe = ("import json, os, sys\n"
             "import bench_core\n"
             "from bench_core.summary.report import SUMMARY_NOTEBOOK\n"
             "from bench_core.sweep.execute import find_template\n"
             "print(json.dumps({'package': bench_core.__file__, 'summary': str(SUMMARY_NOTEBOOK),\n"
             "                  'template': str(find_template()), 'path': [os.path.abspath(p) for p in sys.path]}))\n")
    # -S: no site-packages processing, so the editable install's .pth (which maps bench_core to the
    # checkout) is not run; the project's dependencies come from site-packages, after the target.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])}
    env.pop("BENCH_TEMPLATE", None)
    done = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert not any(Path(p).resolve() == ROOT for p in found["path"])
    assert Path(found["package"]).is_relative_to(target)
    for key, name in (("summary", "summary.ipynb"), ("template", "benchmark.ipynb")):
        path = Path(found[key])
        assert path == target / "bench_core" / "notebooks" / name and path.is_file(), found


def test_rows_of_an_installed_wheel_name_the_commit_it_was_built_from(wheel, tmp_path):
    """A wheel (what `pip install .` builds) records its commit: its rows say it, with no git
    repository in sight; BENCH_GIT_COMMIT still overrides it (the Docker image sets it)."""
    target = install_wheel(wheel[0], tmp_path / "site")
    run = ("import sys\nfrom bench_core.cli import main\n"
           "sys.exit(main(['run', '--model', 'resnet18', '--width', '32', '--height', '32', '--batch-size', '2',"
           " '--steps', '1', '--warmup-steps', '1', '--repeats', '1', '--min-seconds', '0', '--mode', 'infer',"
           " '--device', 'cpu', '--json']))\n")
    env = {k: v for k, v in os.environ.items() if k != "BENCH_GIT_COMMIT"}
    env["PYTHONPATH"] = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])
    for override in (None, "from-the-environment"):
        if override:
            env["BENCH_GIT_COMMIT"] = override
        done = subprocess.run([sys.executable, "-S", "-c", run], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        (row,) = json.loads(done.stdout)
        assert row["status"] == "ok" and row["git_commit"] == (override or wheel[2]), row["git_commit"]
