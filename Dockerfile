# syntax=docker/dockerfile:1
# The approval-worker image: uv's multi-stage pattern (dependencies first, then the project),
# no dev group, byte-compiled, running as a non-root user on a read-only root filesystem.
#   docker build -t approval-worker:0.2.0 .
#   docker run --read-only --tmpfs /tmp -p 8000:8000 --env-file .env approval-worker:0.2.0
# tests/test_image.py replays these steps outside a container (no engine in CI).

FROM python:3.12-slim-bookworm AS builder
COPY --from=ghcr.io/astral-sh/uv:0.9 /uv /uvx /bin/
# compile every .pyc now (a read-only image cannot write them later), copy out of the cache
# mount, and use the image's interpreter rather than download one
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=0
WORKDIR /app
# the dependencies alone: this layer is rebuilt only when the lock changes
RUN --mount=type=cache,target=/root/.cache/uv \
    --mount=type=bind,source=uv.lock,target=uv.lock \
    --mount=type=bind,source=pyproject.toml,target=pyproject.toml \
    uv sync --locked --no-install-project --no-dev
COPY . /app
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --locked --no-dev
# uv compiles what it installs; the project's own source is compiled here
RUN python -m compileall -q approval_worker core store inbox ops worker api agent examples \
    run.py recover.py webhook.py lambda_handler.py

FROM python:3.12-slim-bookworm
RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --no-create-home --home-dir /nonexistent app \
    && mkdir /data && chown app:app /data
# owned by root: the app user can read and run the code but never change it
COPY --from=builder /app /app
ENV PATH="/app/.venv/bin:$PATH" \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LOG_FORMAT=json
# the working directory (the app user's, where .env and a default SQLite file would be): with
# --read-only mount a volume there, or set DATABASE_URL (production) and nothing is written
WORKDIR /data
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
CMD ["approval-worker", "serve", "--host", "0.0.0.0", "--port", "8000"]
