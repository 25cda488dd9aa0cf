# syntax=docker/dockerfile:1
# turngate: one image for the API (`turngate serve`, the default command) and the worker
# (`turngate worker`). Build from the repository root:
#   docker build -t turngate:local .
# The all-in-one image (Temporal dev server + worker + API in one container, embedded defaults,
# an observer-mode gateway unless a policy is set; for trying turngate, not for production):
#   docker build --target allinone -t turngate:allinone .
#   docker run -p 8010:8010 turngate:allinone
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# A self-contained virtual environment, copied whole into the runtime stage.
RUN python -m venv /opt/turngate \
    && /opt/turngate/bin/pip install --upgrade pip \
    && /opt/turngate/bin/pip install .

# The same environment with the `devserver` extra: the `temporal` CLI for the embedded server.
FROM build AS build-allinone
RUN /opt/turngate/bin/pip install ".[devserver]"

# All in one: `turngate dev --observer` (docs/DEPLOY.md#all-in-one-image). Keyless read-only
# mode is on: observer clients read /snapshot, /tail, /status and /capabilities without a key;
# anything else from outside the container needs the dev key printed at start (docker logs).
FROM ${PYTHON_IMAGE} AS allinone
LABEL org.opencontainers.image.title="turngate all-in-one" \
      org.opencontainers.image.description="turngate with an embedded Temporal dev server, worker and API: observer mode unless TURNGATE_POLICY_MODULE is set. For trying turngate, not for production." \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/turngate/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TURNGATE_DATA_DIR=/var/lib/turngate \
    TURNGATE_HOST=0.0.0.0 \
    TURNGATE_KEYLESS_READ=true
RUN groupadd --system --gid 10001 turngate \
    && useradd --system --uid 10001 --gid turngate --home-dir /var/lib/turngate --create-home \
       --shell /usr/sbin/nologin turngate
COPY --from=build-allinone /opt/turngate /opt/turngate
USER 10001:10001
WORKDIR /var/lib/turngate
VOLUME /var/lib/turngate
EXPOSE 8010
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8010/healthz', timeout=4)"]
ENTRYPOINT ["turngate"]
CMD ["dev", "--observer", "--port", "8010"]

# The default target: the API and worker image of a deployment.
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="turngate" \
      org.opencontainers.image.description="A deterministic, durable, auditable boundary in front of LLM calls, built on Temporal." \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/turngate/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    TURNGATE_DATA_DIR=/var/lib/turngate \
    TURNGATE_HOST=0.0.0.0 \
    TURNGATE_PORT=8010
# /run/turngate: where deployments mount the history encryption key and the first admin key;
# owned by the app user so a fresh named volume there is writable by `turngate setup`.
RUN groupadd --system --gid 10001 turngate \
    && useradd --system --uid 10001 --gid turngate --home-dir /var/lib/turngate --create-home \
       --shell /usr/sbin/nologin turngate \
    && install -d -o 10001 -g 10001 -m 0700 /run/turngate
COPY --from=build /opt/turngate /opt/turngate
USER 10001:10001
WORKDIR /var/lib/turngate
EXPOSE 8010
# Probes the API. Disable it for worker, setup and gc containers (compose: `healthcheck:
# disable: true`; Kubernetes ignores HEALTHCHECK and uses its probes).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8010/healthz', timeout=4)"]
ENTRYPOINT ["turngate"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8010"]
