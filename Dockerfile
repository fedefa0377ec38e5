# The image deploy/kubernetes runs. Build: docker build -t provider_health_exporter .
# (No Docker engine runs on the project's CI machines, so CI does not build it.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=$(cat VERSION)" \
      -o /provider_health_exporter ./cmd/provider_health_exporter

# Static binary, no shell, non-root: what the Deployment's securityContext expects.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /provider_health_exporter /bin/provider_health_exporter
USER 65534:65534
EXPOSE 9877
ENTRYPOINT ["/bin/provider_health_exporter"]
CMD ["--config.file=/etc/provider_health/provider_health.yml"]
