"""Running the template in JupyterLab (`make lab`) must not dirty the checkout: the shipped notebook, run and
saved (or autosaved), stays byte for byte as committed, through jupyter_server's own contents manager with
the pre-save hook `make lab` gives it; the run with its outputs is kept under outputs/lab/executed/, and a
notebook of your own is saved as it is."""
import json
import re
import shutil
from pathlib import Path

import pytest

from bench_core.sweep.lab_save import EXECUTED, keep_shipped_clean

ROOT = Path(__file__).resolve().parents[1]


def ran(content: dict) -> dict:
    """What JupyterLab sends to save after Run All: outputs, execution counts, the kernel's language_info."""
    for n, cell in enumerate(c for c in content["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = n + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout",
                            "text": "resnet18 infer fp32 bs=8: repeat 0 (1 of 3) 42.0 images/s [ok]\n"}]
        cell["metadata"]["execution"] = {"iopub.status.idle": "2026-11-28T05:00:00Z"}
    content["metadata"]["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python",
                                            "codemirror_mode": {"name": "ipython", "version": 3},
                                            "file_extension": ".py", "nbconvert_exporter": "python"}
    return content


@pytest.fixture
def checkout(tmp_path):
    """A checkout's notebooks/ and what `make lab` serves it with."""
    pytest.importorskip("jupyter_server")
    from jupyter_server.services.contents.largefilemanager import LargeFileManager
    from traitlets.config import Config
    shutil.copytree(ROOT / "notebooks", tmp_path / "notebooks")
    hook = re.search(r"--ContentsManager\.pre_save_hook=(\S+)", (ROOT / "Makefile").read_text()).group(1)
    # the option as `make lab` passes it: the import string, resolved as the server resolves its config
    manager = LargeFileManager(config=Config({"ContentsManager": {"pre_save_hook": hook}}),
                               root_dir=str(tmp_path / "notebooks"))
    return tmp_path, manager


@pytest.mark.parametrize("name", ["benchmark.ipynb", "summary.ipynb"])
def test_running_and_saving_a_shipped_notebook_leaves_it_as_committed(checkout, name):
    root, manager = checkout
    committed = (ROOT / "notebooks" / name).read_bytes()
    model = manager.get(name)
    manager.save({"type": "notebook", "format": "json", "content": ran(model["content"])}, name)
    assert (root / "notebooks" / name).read_bytes() == committed  # git status: clean
    kept = json.loads((root / EXECUTED / name).read_text())  # nothing of the run lost
    assert any(cell.get("outputs") for cell in kept["cells"])
    assert kept["metadata"]["language_info"]["version"] == "3.11.7"


def test_an_edit_of_the_template_is_saved_and_a_notebook_of_your_own_keeps_its_outputs(checkout):
    root, manager = checkout
    model = manager.get("benchmark.ipynb")
    content = ran(model["content"])
    parameters = next(c for c in content["cells"] if "parameters" in c["metadata"].get("tags", []))
    parameters["source"] = parameters["source"].replace('model: str = "resnet18"', 'model: str = "resnet50"')
    manager.save({"type": "notebook", "format": "json", "content": content}, "benchmark.ipynb")
    saved = json.loads((root / "notebooks" / "benchmark.ipynb").read_text())
    cell = next(c for c in saved["cells"] if "parameters" in c["metadata"].get("tags", []))
    assert 'model: str = "resnet50"' in "".join(cell["source"]) and cell["metadata"]["tags"] == ["parameters"]
    assert all(not c.get("outputs") for c in saved["cells"] if c["cell_type"] == "code")
    mine = ran(manager.get("benchmark.ipynb")["content"])
    manager.save({"type": "notebook", "format": "json", "content": mine}, "mine.ipynb")
    assert any(c.get("outputs") for c in json.loads((root / "notebooks" / "mine.ipynb").read_text())["cells"])


def test_the_hook_leaves_other_files_alone():
    model = {"type": "file", "content": "x", "format": "text"}
    keep_shipped_clean(model, "benchmark.ipynb")
    assert model == {"type": "file", "content": "x", "format": "text"}
