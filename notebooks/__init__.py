"""Not a notebook: this file lets the installed wheel ship this folder as bench_core.notebooks
(pyproject.toml, package-dir), where `bench sweep` and `bench report` find the two templates."""
