"""A YAML mistake in a sweep file is said at the line a person fixes: an unclosed bracket on line 3 is
line 3, not the line (or the end of the file) where PyYAML gave up; one line, exit 2, nothing written."""
import pytest

from bench_core.config.yamlfile import load_yaml_mapping
from bench_core.errors import ConfigError
from conftest import bench_here

# (what went wrong, the file, the line to fix, words the message says)
MISTAKES = [
    ("a bracket never closed, at the end of the file", "name: a\nruns: 1\ngrid: [a, b\n", 3, "'[' here is never closed"),
    ("a bracket never closed, the file going on", "grid:\n  model: [resnet18,\n  precision: fp32\nsettings:\n  width: 64\n",
     2, "'[' here is never closed"),
    ("a bracket closed by a brace", "name: a\nruns: 1\ngrid: {model: [resnet18, resnet50}\n", 3, "never closed"),
    ("a brace never closed", "name: a\nruns: 1\ngrid: {model: resnet18\n", 3, "'{' here is never closed"),
    ("a double quote never closed", 'name: a\ndescription: "abc\nsettings:\n  width: 64\n', 2, "quote here is never closed"),
    ("a single quote never closed", "name: a\ndescription: 'abc\nsettings:\n  width: 64\n", 2, "quote"),
    ("a key without its colon", "name: a\nruns 1\nsettings:\n  width: 64\n", 2, "no ':' after it"),
    ("a key indented too far", "name: a\nsettings:\n  width: 64\n    height: 3\n", 4, "mapping values"),
    ("a tab for indentation", "name: a\nsettings:\n\twidth: 64\n", 3, "'\\t'"),
    ("a list item inside a mapping", "name: a\nsettings:\n  width: 64\n- b\n", 4, "expected <block end>"),
    ("an alias never defined", "name: a\nruns: *n\n", 2, "undefined alias"),
    ("a key given twice", "name: a\nruns: 1\nruns: 2\n", 3, "given twice"),
    ("a second document", "name: a\n---\nname: b\n", 2, "another document"),
]


@pytest.mark.parametrize("what, text, line, words", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_yaml_mistake_names_the_line_to_fix(tmp_path, what, text, line, words):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_yaml_mapping(path, "sweep")
    message = str(caught.value)
    assert f" at line {line}, " in message and words in message, message
    assert "<stream end>" not in message and "\n" not in message


def test_bench_sweep_on_an_unclosed_bracket_on_line_3_says_line_3(tmp_path, capsys):
    """The issue's case, as a user meets it: `bench sweep` names line 3, exit 2, nothing written."""
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nruns: 1\ngrid: {model: [resnet18, precision: [fp32]}\nsettings:\n  width: 32\n")
    done = bench_here(capsys, "sweep", str(path), "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "at line 3, column 15: the '[' here is never closed" in done.stderr
    assert not (tmp_path / "out").exists()
