# Two commands do all the set-up: `make report` (the default sweep and its HTML report)
# and `make test` (the test suite). Both create .venv and install the project on first use.
PYTHON   ?= python3
VENV     ?= .venv
BIN      := $(VENV)/bin
SWEEP    ?= params/default.yaml
# Where bench sweep writes that sweep by itself: outputs/<the file's name> (params/default.yaml: outputs/default).
OUT      ?= outputs/$(basename $(notdir $(SWEEP)))
# Passed to every pip install, e.g. PyTorch's CPU-only wheels (no CUDA libraries to download):
#   make install PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple"
# It applies when .venv is made: run `make clean` first to change an existing one.
PIP_ARGS ?=
# Passed to `jupyter lab`, e.g. LAB_ARGS="--ip 0.0.0.0 --no-browser" on a remote machine or in a container.
LAB_ARGS ?=
# Jupyter refuses to start as root (containers, cloud machines) unless told it is on purpose.
ALLOW_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: install test report report-png lab browser slurm clean help acceptance gpu-wheels
help:
	@echo "make report  - run the default sweep (CPU if no GPU) and write $(OUT)/report.html"
	@echo "               (SWEEP=params/<name>.yaml for another sweep, into outputs/<name>; OUT=DIR elsewhere)"
	@echo "make test    - run the test suite (as root it installs chromium, slurm-wlm and munge when missing,"
	@echo "               for the browser and SLURM tests; otherwise those tests are skipped)"
	@echo "make lab     - start JupyterLab on notebooks/ (LAB_ARGS=\"--ip 0.0.0.0 --no-browser\" for a remote"
	@echo "               machine; --allow-root is added when run as root)"
	@echo "make install - create $(VENV) and install the project (the three above do it on first use);"
	@echo "               PIP_ARGS=\"...\" goes to every pip install, e.g. PyTorch's CPU-only index:"
	@echo "               PIP_ARGS=\"--index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple\""
	@echo "make report-png - after make report: docs/report.png, the README's picture, from $(OUT)/report.html"
	@echo "make acceptance - every GPU (or CPU) path in a few minutes, a table of checks last -> outputs/acceptance"
	@echo "make gpu-wheels - the wheels a lent GPU machine lacks (gpu/wheels.txt, Python 3.12) into .whl/;"
	@echo "               there: bash gpu/acceptance.sh (docs/development.md, First light on a lent GPU)"
	@echo "make clean   - remove $(VENV) and the outputs"

$(BIN)/bench: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet $(PIP_ARGS) pip
	$(BIN)/pip install --quiet $(PIP_ARGS) -e '.[test]'
	touch $(BIN)/bench

install: $(BIN)/bench

# The report test opens report.html in a real headless browser (Debian's chromium).
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) ; } || \
	  echo "chromium not installed: the browser screenshot test will be skipped"

# The SLURM tests start a real one-node cluster (munged, slurmctld, slurmd from Debian's packages) as
# root. policy-rc.d keeps apt from starting the packages' own services: the tests run their own daemons.
slurm:
	@{ command -v slurmctld && command -v slurmd && command -v munged; } >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    { made=; [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && \
	        chmod +x /usr/sbin/policy-rc.d && made=1; }; \
	      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; \
	      status=$$?; [ -z "$$made" ] || rm -f /usr/sbin/policy-rc.d; [ $$status = 0 ]; } ; } || \
	  echo "slurm-wlm and munge not installed (needs root and apt-get): the SLURM tests will be skipped"

test: install browser slurm
	$(BIN)/python -m pytest

report: install
	$(BIN)/bench sweep $(SWEEP) --out $(OUT)

# The README's picture: the top of the default report (title, overview, Headline tables) in headless Chromium
# (run `make report` first).
report-png: install
	$(BIN)/python -m bench_core.summary.screenshot $(OUT)/report.html docs/report.png --height 1500

# `bench acceptance` here; on a machine where this checkout is not installed, `bash gpu/acceptance.sh`.
acceptance: install
	$(BIN)/bench acceptance

# What a lent GPU machine's image lacks (gpu/wheels.txt), as Python 3.12 wheels for x86-64 Linux, into
# .whl/ (git-ignored), carried with the device call.
WHEEL_PLATFORMS := $(foreach n,39 35 34 31 28 27 26 24 17 5,--platform manylinux_2_$(n)_x86_64) \
                   --platform manylinux2014_x86_64 --platform manylinux1_x86_64
gpu-wheels:
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  $(WHEEL_PLATFORMS) -d .whl -r gpu/wheels.txt
	@ls .whl/*.whl | wc -l; du -sh .whl

# The lab extra once (again when pyproject.toml changes), not at every launch.
$(BIN)/jupyter-lab: $(BIN)/bench
	$(BIN)/pip install --quiet $(PIP_ARGS) -e '.[lab]'
	touch $(BIN)/jupyter-lab

# Saving a shipped notebook keeps it as committed (outputs go to outputs/lab/executed/): bench_core/sweep/lab_save.py.
LAB_SAVE := --ContentsManager.pre_save_hook=bench_core.sweep.lab_save.keep_shipped_clean

lab: $(BIN)/jupyter-lab
	$(BIN)/jupyter lab $(ALLOW_ROOT) $(LAB_SAVE) $(LAB_ARGS) notebooks/

clean:
	rm -rf $(VENV) outputs/*/ *.egg-info
