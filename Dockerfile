# The image deploy/kubernetes runs, for every platform of .promu.yml's
# crossbuild (linux/amd64, linux/arm64). Build and push both with buildx:
#
#   docker buildx build --platform linux/amd64,linux/arm64 \
#     -t provider_health_exporter:$(cat VERSION) \
#     --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg BRANCH=$(git rev-parse --abbrev-ref HEAD) --push .
#
# (plain `docker build` gives the image of the builder's own platform). The
# Go toolchain runs on the builder's platform and cross-compiles for the
# target's (no emulation needed: the binary has no cgo). No Docker engine runs
# on the project's CI machines, so CI does not build the image; `make cross`
# (part of `make test`) cross-compiles linux/arm64 so that the other
# platform's build cannot rot, and a test checks that this file builds for
# TARGETOS/TARGETARCH.
# The ldflags are those of .promu.yml, so provider_health_exporter_build_info
# in the image carries the version, revision, branch and build date as a
# `make build` binary does. .git is not sent to the builder (.dockerignore):
# revision and branch come in as build arguments.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
ARG TARGETOS
ARG TARGETARCH
ARG REVISION=unknown
ARG BRANCH=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -tags netgo \
      -ldflags "-s -w \
        -X github.com/prometheus/common/version.Version=$(cat VERSION) \
        -X github.com/prometheus/common/version.Revision=${REVISION} \
        -X github.com/prometheus/common/version.Branch=${BRANCH} \
        -X github.com/prometheus/common/version.BuildUser=docker \
        -X github.com/prometheus/common/version.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)" \
      -o /provider_health_exporter ./cmd/provider_health_exporter

# Static binary, no shell, non-root: what the Deployment's securityContext expects.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /provider_health_exporter /bin/provider_health_exporter
USER 65534:65534
EXPOSE 9877
ENTRYPOINT ["/bin/provider_health_exporter"]
CMD ["--config.file=/etc/provider_health/provider_health.yml"]
