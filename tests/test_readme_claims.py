"""What the README and the template's own text say about defaults and estimates is what the code does: the
template runs resnet18 at the size its words give, the gate's sweep is what its line says and its dry run
estimates what the README quotes, and the figures quoted for the gate's options are their defaults."""
import ast
import json
import re
from pathlib import Path

import pytest

from bench_core import BenchConfig
from bench_core.cli.acceptance import DEFAULT_BUDGET_S
from bench_core.results.comparison import MIN_EFFECT
from bench_core.results.sample_size import runs_to_detect
from bench_core.summary.diff import FAIL_ABOVE
from bench_core.sweep.plan import estimate_seconds, load_sweep

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def template_defaults() -> dict:
    """The template's parameters cell, as the values it assigns."""
    notebook = json.loads((ROOT / "notebooks" / "benchmark.ipynb").read_text())
    cell = next(c for c in notebook["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))
    tree = ast.parse("".join(cell["source"]))
    return {node.target.id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.AnnAssign) and node.value is not None}


def test_the_template_runs_the_model_and_size_the_readme_and_its_own_text_say():
    values = template_defaults()
    cfg = BenchConfig(model=values["model"], width=values["width"], height=values["height"], device="cpu")
    width = cfg.width  # the model's own where the template leaves it empty
    said = re.search(r"The template's parameters are the params fields, with smaller defaults \((\S+) at (?:its )?"
                     r"(\d+) px", README.replace("\n", " "))
    assert said, "the README no longer says the template's defaults"
    assert (said.group(1), int(said.group(2))) == (values["model"], width)
    intro = "".join(json.loads((ROOT / "notebooks" / "benchmark.ipynb").read_text())["cells"][0]["source"])
    assert re.search(rf"\({values['model']} at its {width} px", intro.replace("\n", " "))


def test_the_gate_sweep_is_what_the_readme_says_and_its_estimate_is_the_one_quoted():
    plan = load_sweep(ROOT / "params" / "ci-gate.yaml")
    text = README.replace("\n", " ")
    said = re.search(r"`params/ci-gate.yaml` measures each configuration in (\d+) separate runs \((\S+) train and "
                     r"infer, (\S+), (\d+) px; its dry run estimates ([\d.]+) minutes", text)
    assert said, "the README no longer describes params/ci-gate.yaml"
    first = plan.configs[0]
    assert int(said.group(1)) == plan.runs and said.group(2) == first.model and said.group(3) == first.precision
    assert int(said.group(4)) == first.width == first.height
    assert {c.mode for c in plan.configs} == {"train", "infer"}
    assert said.group(5) == f"{estimate_seconds(plan) / 60:.1f}"


def test_the_custom_example_sweep_is_what_its_comment_in_the_readme_says():
    plan = load_sweep(ROOT / "params" / "custom-example.yaml")
    line = next(line for line in README.splitlines() if line.startswith("bench sweep params/custom-example.yaml"))
    modes, batches, precisions = ({getattr(c, k) for c in plan.configs} for k in ("mode", "batch_size", "precision"))
    assert f"{' and '.join(sorted(modes, reverse=True))}" in line
    assert f"batch {' and '.join(str(b) for b in sorted(batches))}" in line
    assert " and ".join(sorted(precisions, key=["fp32", "amp-bf16"].index)) in line


@pytest.mark.parametrize("said, value", [
    (r"\(`--budget-s`, default (\d+)\s+s\)", lambda: f"{DEFAULT_BUDGET_S:g}"),
    (r"the change is at least `--min-effect` \((\d+)%\)", lambda: f"{MIN_EFFECT * 100:g}"),
    (r"slower by more than `--fail-above` \(default (\d+)%\)", lambda: f"{FAIL_ABOVE * 100:g}"),
])
def test_the_defaults_the_readme_quotes_are_the_defaults(said, value):
    found = re.search(said, README.replace("\n", " "))
    assert found, said
    assert found.group(1) == value()


def test_the_runs_the_readme_says_a_3_percent_drop_needs_are_what_bench_diff_computes():
    said = re.search(r"at a run-to-run spread of (\d+)\s?%, a 3\s?% drop needs (\d+) runs a side with `--fail-above "
                     r"([\d.]+)%`", README.replace("\n", " "))
    assert said, "the README no longer answers how many runs a 3 % drop needs"
    spread, runs, threshold = float(said.group(1)) / 100, int(said.group(2)), float(said.group(3)) / 100
    assert runs_to_detect(0.03, spread, threshold) == runs
