# syntax=docker/dockerfile:1
#
# kvrouter as a container: one static binary (CGO_ENABLED=0) on distroless
# static, running as a non-root user. Build and push:
#
#   docker build -t kvrouter:dev --build-arg VERSION=$(git describe --always) .
#
# The same image runs every subcommand: `serve` (the router, the default),
# `agent` (the sidecar next to a vLLM/SGLang engine), `mocker` and `up`.
# Every deploy/ manifest relies on the ENTRYPOINT below and passes only args.

# ---- build stage -----------------------------------------------------------
FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so a source-only change reuses the download layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Static, reproducible, no cgo: the result runs on an image with no libc.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/kvrouter ./cmd/kvrouter \
 && mkdir -p /out/var/lib/kvrouter

# ---- runtime stage ---------------------------------------------------------
# distroless/static: CA certificates (TLS to an external NATS), /etc/passwd
# with the nonroot user (65532), tzdata; no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kvrouter /usr/local/bin/kvrouter
# The data dir (JetStream store of the embedded NATS server, snapshots). In
# Kubernetes mount a volume here: the root file system is read-only.
COPY --from=build --chown=65532:65532 /out/var/lib/kvrouter /var/lib/kvrouter
USER 65532:65532
WORKDIR /var/lib/kvrouter
# 8000: OpenAI front door, /metrics, /health, /ready, status page.
# 4222: embedded NATS (only when the router runs it and --nats-host exposes it).
EXPOSE 8000
ENTRYPOINT ["/usr/local/bin/kvrouter"]
# Listen on all interfaces inside the container (the binary's default is
# loopback, which a container's port mapping cannot reach).
CMD ["serve", "--host=0.0.0.0", "--data-dir=/var/lib/kvrouter"]
