# notebook-bench on a CUDA PyTorch base image.
#
# Base: PyTorch 2.9.1, CUDA 12.8, cuDNN 9, Python 3.11 (conda in /opt/conda), Ubuntu 22.04.
# C compiler: gcc, installed from Ubuntu's apt below. The -runtime base ships none, and Triton
# (torch.compile on a GPU) compiles its launcher with the system C compiler at run time, so
# without it every `compile != off` run fails; the -devel base would bring one at several GB more.
# Host needs: NVIDIA driver >= 570.26 (CUDA 12.8; Blackwell GPUs need it). Older drivers from
# 525.60.13 run it through CUDA minor-version compatibility on pre-Blackwell GPUs. The host
# also needs the NVIDIA Container Toolkit for `--gpus all`.
#
#   docker build -t notebook-bench --build-arg BENCH_UID=$(id -u) --build-arg BENCH_GID=$(id -g) \
#                --build-arg BENCH_GIT_COMMIT=$(git rev-parse --short=12 HEAD) .
#   mkdir -p outputs
#   docker run --rm --gpus all --ipc=host -v "$PWD/outputs:/workdir/outputs" notebook-bench
#
# Results go to /workdir/outputs: mount a host folder there or they die with the container.
ARG BASE_IMAGE=pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
FROM ${BASE_IMAGE}

# The container user. Build with your own uid/gid (see above) so files written to the
# mounted outputs folder belong to you; or keep 1000 and run with --user $(id -u):$(id -g).
ARG BENCH_UID=1000
ARG BENCH_GID=1000
# The project's commit, recorded in every result row (the image carries no .git).
ARG BENCH_GIT_COMMIT=unknown

ENV MPLBACKEND=Agg \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    BENCH_GIT_COMMIT=${BENCH_GIT_COMMIT} \
    HOME=/home/bench \
    USER=bench

# A user for the uid, unless the base image already has one (then that account is reused).
# HOME is world-writable (sticky) so any --user uid can keep its caches there: Jupyter's
# runtime files, matplotlib and torch.compile caches.
RUN (getent group "${BENCH_GID}" >/dev/null || groupadd --gid "${BENCH_GID}" bench) \
 && (getent passwd "${BENCH_UID}" >/dev/null \
     || useradd --uid "${BENCH_UID}" --gid "${BENCH_GID}" --no-create-home --home-dir /home/bench --shell /bin/bash bench) \
 && mkdir -p /home/bench /workdir/outputs \
 && chmod 1777 /home/bench \
 && chown "${BENCH_UID}:${BENCH_GID}" /workdir /workdir/outputs

WORKDIR /workdir

# gcc (+ libc headers) for Triton's run-time compile step; Python's headers come with conda.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/* \
 && gcc --version

# The project, editable (-e): `bench sweep` and `bench report` find notebooks/ beside the
# bench_core package, so the package must stay in /workdir rather than go to site-packages.
# README.md is pyproject's readme. The constraints file keeps the base image's CUDA
# torch/torchvision: pip must not swap them for a PyPI build while resolving dependencies.
COPY pyproject.toml README.md ./
COPY bench_core ./bench_core
RUN python -c "from importlib.metadata import version as v; print(f'torch=={v(\"torch\")}\ntorchvision=={v(\"torchvision\")}')" \
        > /tmp/base-constraints.txt \
 && pip install --no-cache-dir -c /tmp/base-constraints.txt -e ".[lab]" \
 && python -m ipykernel install --sys-prefix \
 && python -c "import torch; assert torch.version.cuda, 'CPU torch in a CUDA image'"

# Notebooks and sweep files, writable by the container user (JupyterLab saves edits).
COPY --chown=${BENCH_UID}:${BENCH_GID} notebooks ./notebooks
COPY --chown=${BENCH_UID}:${BENCH_GID} params ./params

USER ${BENCH_UID}:${BENCH_GID}
VOLUME ["/workdir/outputs"]
# JupyterLab: docker run -p 8888:8888 --entrypoint jupyter notebook-bench lab --ip=0.0.0.0 --no-browser
EXPOSE 8888

ENTRYPOINT ["bench"]
CMD ["sweep", "params/default.yaml", "--out", "outputs/default"]
