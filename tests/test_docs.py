"""The generated reference sections: complete, well-formed, and current in README.md and docs/reference.md."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench_core import docs
from bench_core.cli import COMMANDS, build_parser
from bench_core.config import BenchConfig
from bench_core.results import columns, iter_rows
from bench_core.workload.models import model_table
from bench_core.workload.precision import ALIASES, PRECISIONS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REFERENCE = ROOT / "docs" / "reference.md"


def body_rows(table_text: str) -> list[list[str]]:
    """The cells of every body row (below the |---| line) of the markdown tables in `table_text`."""
    rows, in_body = [], False
    for line in table_text.splitlines():
        if not line.startswith("|"):
            in_body = False
        elif line.startswith("|---"):
            in_body = True
        elif in_body:
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def first_column(table_text: str) -> list[str]:
    return [row[0] for row in body_rows(table_text)]


@pytest.mark.parametrize("page, wanted", [(README, {"commands", "layout"}),
                                          (REFERENCE, {"params", "schema", "models", "precisions"})])
def test_generated_sections_are_current(page, wanted):
    text = page.read_text()
    assert set(docs.section_names(text)) >= wanted, f"{page.name} lost generated sections"
    stale = docs.stale_sections(text)
    assert not stale, f"{page} is stale in {stale}: run `python -m bench_core.docs --write`"


def test_every_generated_section_lives_in_one_of_the_pages():
    names = [n for page in (README, REFERENCE) for n in docs.section_names(page.read_text())]
    assert sorted(names) == sorted(docs.SECTIONS), "a section is missing from the docs or shown twice"


def test_readme_names_every_bench_command_and_links_the_reference():
    text = README.read_text()
    for name in COMMANDS:
        assert f"`bench {name}`" in text, f"bench {name} is not in the README"
    assert "docs/reference.md" in text
    for anchor in re.findall(r"\]\(docs/reference\.md#([\w-]+)\)", text):
        headings = [re.sub(r"[^\w -]", "", h).strip().lower().replace(" ", "-")
                    for h in re.findall(r"^#+ (.+)$", REFERENCE.read_text(), flags=re.M)]
        assert anchor in headings, f"README links docs/reference.md#{anchor}, which has no such heading"


def test_readme_first_screen_shows_the_two_commands_the_picture_time_and_size():
    first_screen = "\n".join(README.read_text().splitlines()[:40])
    for wanted in ("make report", "make test", "docs/report.png", "minutes", "GB"):
        assert wanted in first_screen, f"the README's first screen lacks {wanted!r}"


def test_every_config_field_is_in_the_params_reference():
    listed = first_column(docs.params_reference())
    assert listed == [f"`{f.name}`" for f in dataclasses.fields(BenchConfig)]
    text = docs.params_reference()
    for f in dataclasses.fields(BenchConfig):
        assert f"`--{f.name.replace('_', '-')}" in text
        for choice in f.metadata.get("choices", ()):
            assert f"`{choice}`" in text


def test_every_schema_column_is_in_the_schema_reference():
    listed = [row[1] for row in body_rows(docs.schema_reference())]
    assert listed == [f"`{name}`" for name in columns()]


def test_every_model_and_precision_is_listed():
    models = first_column(docs.models_reference())
    for name in [row["name"] for row in model_table() if ":" not in row["name"]]:
        assert f"`{name}`" in models
    text = docs.precisions_reference()
    for name in PRECISIONS:
        assert f"| `{name}` |" in text
    for alias in ALIASES:
        assert f"`{alias}`" in text


@pytest.mark.parametrize("name", list(docs.SECTIONS))
def test_tables_are_well_formed(name):
    """Every row has as many cells as its header: a stray '|' in a help text would break it."""
    widths = []
    for line in docs.render(name).splitlines() + [""]:
        if line.startswith("|"):
            widths.append(len(re.split(r"(?<!\\)\|", line)))
        elif widths:
            assert len(set(widths)) == 1, f"{name}: ragged table {widths}"
            widths = []
    prose = re.sub(r"`[^`]*`", "", docs.render(name))
    assert not re.search(r"(?<!\\)<", prose), "a bare <name> outside code would be swallowed as an HTML tag"
    assert "|" not in "".join(re.findall(r"`[^`]*`", docs.render(name))), "renderers disagree on '|' in code"


PAGE = """# Title

Hand-written text stays.

<!-- BEGIN GENERATED: params -->
old table
<!-- END GENERATED: params -->

More text.

<!-- BEGIN GENERATED: models -->
<!-- END GENERATED: models -->
"""


def test_check_finds_stale_sections_and_write_fixes_them(tmp_path, capsys):
    page = tmp_path / "README.md"
    page.write_text(PAGE)
    assert docs.main(["--check", str(page)]) == docs.EXIT_STALE
    assert "params, models" in capsys.readouterr().err

    assert docs.main(["--write", str(page)]) == docs.EXIT_OK
    text = page.read_text()
    assert text.startswith("# Title\n\nHand-written text stays.\n\n") and "\nMore text.\n" in text
    assert "old table" not in text and "`batch_size`" in text and "`resnet50`" in text
    assert docs.main(["--check", str(page)]) == docs.EXIT_OK
    assert docs.main(["--write", str(page)]) == docs.EXIT_OK and page.read_text() == text  # idempotent

    page.write_text(text.replace("`batch_size`", "`batch`"))  # a hand edit inside a section
    assert docs.main(["--check", str(page)]) == docs.EXIT_STALE
    assert "params" in capsys.readouterr().err


@pytest.mark.parametrize("content, argv_extra, field", [
    ("no markers at all\n", [], "file"),
    ("<!-- BEGIN GENERATED: params -->\nno end\n", [], "markers"),
    ("<!-- BEGIN GENERATED: flops -->\n<!-- END GENERATED: flops -->\n", [], "section"),
    (PAGE, ["params"], "sections"),
])
@pytest.mark.parametrize("mode", ["--write", "--check"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, content, argv_extra, field, mode):
    page = tmp_path / "README.md"
    page.write_text(content)
    assert docs.main([*argv_extra, mode, str(page)]) == docs.EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"error: {field}:" in err, err
    assert page.read_text() == content


def test_unknown_section_to_print_and_missing_file(tmp_path, capsys):
    assert docs.main(["flops"]) == docs.EXIT_BAD_INPUT
    assert "allowed: commands, layout, params, schema, summary, models, precisions" in capsys.readouterr().err
    assert docs.main(["--check", str(tmp_path / "absent.md")]) == docs.EXIT_BAD_INPUT
    assert "cannot read" in capsys.readouterr().err
    assert not (tmp_path / "absent.md").exists()


def test_module_cli_prints_and_checks(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bench_core.docs", "params"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("<!-- BEGIN GENERATED: params -->")
    page = tmp_path / "page.md"
    page.write_text(out.stdout)
    check = subprocess.run([sys.executable, "-m", "bench_core.docs", "--check", str(page)], capture_output=True,
                           text=True, cwd=ROOT, timeout=120)
    assert check.returncode == 0, check.stderr


def test_the_recorded_parameter_counts_are_checked_and_rewritten(tmp_path, monkeypatch, capsys):
    """bench models reads the models' parameter counts from a generated file: a wrong count there is
    stale (--check), and --write counts them again. The pages --write rewrites are copies: a test that wrote the
    checkout's README would hide a stale section from test_generated_sections_are_current run after it."""
    import json
    import shutil

    from bench_core.workload.models import PARAMS_FILE, count_parameters_of
    recorded = tmp_path / "model_params.json"
    counts = json.loads(PARAMS_FILE.read_text())
    recorded.write_text(json.dumps({**counts, "resnet18": counts["resnet18"] + 1}, indent=1) + "\n")
    monkeypatch.setattr(docs, "PARAMS_FILE", recorded)
    for page in docs.DOC_FILES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / page, tmp_path / page)
    monkeypatch.chdir(tmp_path)
    assert docs.main(["--check"]) == docs.EXIT_STALE
    assert "stale parameter counts" in capsys.readouterr().err
    assert docs.main(["--write"]) == docs.EXIT_OK and docs.main(["--check"]) == docs.EXIT_OK
    assert json.loads(recorded.read_text())["resnet18"] == count_parameters_of("resnet18") == 11_689_512


WALK = ROOT / "docs" / "this-or-that.md"


def test_the_this_or_that_walk_runs_commands_bench_takes_and_states_the_kept_figures():
    """docs/this-or-that.md answers a newcomer's question from the kept runs: every bench command in it is one
    bench's parser takes as written, and the kept figures it quotes are the kept rows' own."""
    text = WALK.read_text()
    commands = []
    for block in re.findall(r"```(?:text|bash)\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        commands += [line.removeprefix("$ ").split("#")[0].split()[1:] for line in joined.splitlines()
                     if line.removeprefix("$ ").startswith("bench ")]
    assert len(commands) >= 6
    for argv in commands:
        parser = build_parser(commands=[argv[0]])
        args, unknown = parser.parse_known_args(argv)
        assert not unknown and args.command == argv[0], argv
    served = {int(r["concurrency"]): r["output_tokens_per_s"] for r in iter_rows(ROOT / "gpu" / "runs" / "h200-2026-11-27")
              if r.get("mode") == "serve" and r.get("status") == "ok"}
    assert f"68 tokens/s to 1 user and {served[8]:.0f} to 8" in text and round(served[1]) == 68
