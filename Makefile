# provider_health_exporter — build, test and run.
#
# `make test` runs every test: unit tests (with -race), the integration tests
# against real sshd/libvirtd, kube-apiserver/etcd and Prometheus/Alertmanager
# started by the scripts under testdata/, the status page in headless
# Chromium, the demo, and the mixin's generation, lint and promtool tests.
# `make demo` runs the exporter with entries of the three kinds, each Ready
# and not: real sshd and libvirtd, real kube-apiserver and etcd, and a
# loopback stand-in of the Compute API (as root on Debian).

GO       ?= go
GOFMT    ?= gofmt
BIN      := provider_health_exporter
PKGS     := ./...
# A module of its own (kustomize, Helm and the Prometheus Operator's API stay
# out of the exporter's dependencies): checks of the manifests in
# deploy/kubernetes and of the Helm chart in deploy/helm.
VALIDATE := deploy/kubernetes/validate
TOOLS    := $(GO) tool -modfile=tools/go.mod
# Every go test has a timeout well below CI's 90 minutes, so a hang fails
# fast with every goroutine's stack instead of eating the whole job.
TEST_TIMEOUT ?= 20m

.PHONY: all
all: lint build test

# promu stamps the version from VERSION and git into the binary.
.PHONY: build
build:
	$(TOOLS) promu build --prefix .

.PHONY: test
test: deps lint cross unit toykind exposition integration mixin-test release release-check

# Files generated from the code, by programs (no test suite): the JSON
# Schema of the configuration file (docs/provider_health.schema.json and
# its copy under the chart's config value), and the parts of README.md,
# docs/metrics.md, docs/configuration.md and mixin/runbook.md between
# their <!-- BEGIN GENERATED: ... --> markers (kinds, labels, reasons,
# runbook items), from the table of kinds (internal/kinds) and each
# kind's KindDoc (internal/generate); then the chart README's values
# table. The command's tests fail, naming the file, when one is stale
# (docs/development.md: "Adding a provider"). `make mixin` generates the
# mixin's files.
.PHONY: generate
generate:
	$(GO) run ./internal/generate
	$(GO) -C $(VALIDATE) run ./chart-readme

# The platforms of .promu.yml's crossbuild (and of the Dockerfile's buildx
# build) other than CI's own: compiled once by `make test` so that a
# platform-specific file cannot break them unseen.
CROSS_PLATFORMS ?= linux/arm64
.PHONY: cross
cross:
	@for p in $(CROSS_PLATFORMS); do \
	  echo "cross-compiling for $$p"; \
	  CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} $(GO) build -trimpath -tags netgo -o /dev/null ./cmd/provider_health_exporter || exit 1; \
	done

# unit needs Go and nothing else: no root, no package from apt.
.PHONY: unit
unit:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS)
	$(GO) -C $(VALIDATE) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(GO) -C tools test -count=1 -timeout $(TEST_TIMEOUT) ./ocibuild/

# The container image without a Docker daemon: the exporter cross-compiled
# for the Dockerfile's platforms (linux/amd64, linux/arm64) with its flags,
# in one multi-platform image written as an OCI image layout to IMAGE_OCI,
# by tools/ocibuild (go-containerregistry, pinned in tools/go.mod). Push it
# with `go tool -modfile=tools/go.mod crane push $(IMAGE_OCI) REGISTRY/REPO:TAG`
# (docs/deployment.md: "The image").
IMAGE_OCI ?= $(CURDIR)/.build/image-oci
.PHONY: image-oci
image-oci:
	$(GO) -C tools run ./ocibuild -repo $(CURDIR) -out $(IMAGE_OCI)

# What a tagged release publishes (docs/deployment.md: "Releases"), built
# into RELEASE_DIR and pushed nowhere: the promu tarballs of .promu.yml's
# platforms (promu build per platform with GOOS/GOARCH and promu tarball:
# promu crossbuild needs Docker and the network, and promu crossbuild
# tarballs reads every directory under .build), the packaged chart (Helm
# pinned in the validate module), sha256sums.txt of both (promu checksum),
# and the OCI image (tools/ocibuild, as make image-oci) of the same
# binaries: each platform's is built once, and the file in its tarball is
# the file in its image. All carry VERSION; release-check checks that, and
# that the binaries are the same. .github/workflows/release.yml runs both
# on a tag, then pushes.
RELEASE_DIR ?= $(CURDIR)/.build/release
RELEASE_PLATFORMS ?= linux/amd64 linux/arm64
VERSION := $(shell cat VERSION)
HELM := $(GO) -C $(VALIDATE) tool helm
.PHONY: release release-check
release:
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	@# promu built for this machine first: go tool would build it for GOOS/GOARCH.
	@# promu names the tarballs after the git remote's URL: the project's, for
	@# a checkout without that remote too (git reads GIT_CONFIG_* first).
	@export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=remote.origin.url \
	  GIT_CONFIG_VALUE_0=https://$$(sed -n 's/^ *path: *//p' .promu.yml | head -1) && \
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(GO) build -modfile=tools/go.mod -o $$tmp/promu github.com/prometheus/promu && \
	for p in $(RELEASE_PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; \
	  echo ">> $$os/$$arch"; \
	  GOOS=$$os GOARCH=$$arch $$tmp/promu build --prefix $$tmp/$$os-$$arch && \
	  GOOS=$$os GOARCH=$$arch $$tmp/promu tarball --prefix $(RELEASE_DIR) $$tmp/$$os-$$arch || exit 1; \
	done && \
	$(HELM) package $(CURDIR)/$(CHART) --version $(VERSION) --app-version $(VERSION) --destination $(RELEASE_DIR) && \
	$$tmp/promu checksum $(RELEASE_DIR) && \
	$(GO) -C tools run ./ocibuild -repo $(CURDIR) -binaries $$tmp -platforms "$$(echo $(RELEASE_PLATFORMS) | tr ' ' ,)" -out $(RELEASE_DIR)/image-oci

release-check:
	PHE_RELEASE_DIR=$(RELEASE_DIR) $(GO) -C $(VALIDATE) test -count=1 -tags release -run '^TestRelease$$' ./

# The toy kind of docs/development.md's "Adding a provider" compiled into the
# real binary (build tag toykind: internal/toykind and its row in
# internal/kinds/toykind.go) and run through it, beside
# every other test of the command, which must not care how many kinds
# there are.
.PHONY: toykind
toykind:
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -tags toykind ./cmd/provider_health_exporter/

# Tests that run promtool carry the promtool build tag: the exposition
# formats checked by the promtool of Prometheus 2.42 (Debian) and 3 (built by
# testdata/prometheus/build-prometheus.sh), and the mixin's tests (mixin-lint).
.PHONY: exposition
exposition:
	PHE_PROMTOOL3="$$($(PROMETHEUS3) | sed -n 2p)" && test -n "$$PHE_PROMTOOL3" && export PHE_PROMTOOL3 && \
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -tags promtool -run 'TestExpositionFormats' ./cmd/provider_health_exporter/

.PHONY: lint
lint:
	@out="$$($(GOFMT) -l $$(git ls-files "*.go"))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@# Markdown links and anchors, and the doc sections code comments cite (also run by make unit).
	$(GO) test -count=1 -run 'TestRepository' ./internal/mdlinks/
	@# go.mod says what the code imports, no more and no less.
	$(GO) mod tidy -diff
	$(GO) vet $(PKGS)
	$(GO) -C $(VALIDATE) vet ./...
	$(GO) -C $(VALIDATE) vet -tags integration ./...
	$(GO) -C $(VALIDATE) vet -tags promtool ./...
	$(GO) -C tools vet ./ocibuild/
	$(GO) -C $(VALIDATE) vet -tags release ./...
	@# The release workflow (and any other), with actionlint pinned in tools/go.mod.
	$(TOOLS) actionlint
	$(GO) vet -tags integration ./collector/kvm/ ./collector/kubernetes/
	$(GO) vet -tags e2e ./testdata/e2e/
	$(GO) vet -tags demo ./testdata/demo/ ./testdata/demo/compute-standin/
	$(GO) vet -tags promtool,browser ./cmd/... ./mixin/
	$(GO) vet -tags toykind ./cmd/provider_health_exporter/
	@# Another golangci-lint on the machine (a second checkout's make lint)
	@# holds a lock: wait for it rather than fail.
	$(TOOLS) golangci-lint run --allow-serial-runners ./...
	$(TOOLS) golangci-lint run --allow-serial-runners --build-tags integration ./collector/kvm/ ./collector/kubernetes/
	$(TOOLS) golangci-lint run --allow-serial-runners --build-tags promtool,browser ./cmd/... ./mixin/
	$(TOOLS) golangci-lint run --allow-serial-runners --build-tags demo ./testdata/demo/ ./testdata/demo/compute-standin/
	$(TOOLS) golangci-lint run --allow-serial-runners --build-tags toykind ./cmd/provider_health_exporter/
	@if ! command -v systemd-analyze >/dev/null; then \
	  echo "systemd-analyze not found: skipping the check of deploy/systemd (Debian package systemd)"; exit 0; fi; \
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  sed 's#/usr/local/bin/provider_health_exporter#/bin/true#' deploy/systemd/provider_health_exporter.service > $$tmp/provider_health_exporter.service && \
	  systemd-analyze verify $$tmp/provider_health_exporter.service && echo "systemd unit OK"

# Go benchmark format (compare two runs with benchstat), then the summary
# table of the KVM fleet simulator (docs/scaling.md: "Performance"). The fleet's
# scrapes are long (a 1,000-host cold scrape takes seconds), so it runs a
# fixed number of scrapes; the 1,000-host fleet keeps a few thousand sockets
# open, hence the raised descriptor limit. virsh.sh adds one host's steady
# check against virsh through real sshd and libvirtd (as root, where
# installed; it says so when it skips); schedule.sh the watch caches and the
# node fit at 1,000 Nodes and 20,000 Pods in a real kube-apiserver (where
# built; it says so when it skips); schedule-rows.sh issue 52's rows through
# the real binary in a 256 MiB memory cgroup in front of a stand-in API
# server (as root with cgroup v1; it says so when it skips). What the
# exporter costs the Prometheus that scrapes it is measured apart, with the
# real Prometheus: make bench-prometheus.
BENCH_COUNT      ?= 3
FLEET_COUNT      ?= 2
FLEET_BENCHTIME  ?= 5x
VIRSH_COUNT      ?= 3
VIRSH_BENCHTIME  ?= 5s
.PHONY: bench
bench:
	@ulimit -n 20000 2>/dev/null || ulimit -n "$$(ulimit -Hn)"; \
	out=$$(mktemp) && trap 'rm -f "$$out"' EXIT && \
	$(GO) test -run '^$$' -bench . -skip '^BenchmarkFleet$$' -benchmem -count $(BENCH_COUNT) -timeout 30m $(PKGS) | tee "$$out" && \
	$(GO) test -run '^$$' -bench '^BenchmarkFleet$$' -benchmem -count $(FLEET_COUNT) -benchtime $(FLEET_BENCHTIME) -timeout 30m ./collector/kvm/ | tee -a "$$out" && \
	GO="$(GO)" VIRSH_COUNT=$(VIRSH_COUNT) VIRSH_BENCHTIME=$(VIRSH_BENCHTIME) testdata/bench/virsh.sh "$$out" && \
	GO="$(GO)" testdata/bench/schedule.sh "$$out" && \
	GO="$(GO)" testdata/bench/schedule-rows.sh "$$out" && \
	if grep -q -e '^FAIL' -e '^panic:' "$$out"; then echo "make bench: a benchmark failed" >&2; exit 1; fi; \
	sh testdata/bench/table.sh "$$out"

# The real Prometheus (3, from build-prometheus.sh) scraping the exporter in
# front of a simulated 1,000-host KVM fleet every 5s for a few minutes, once
# per revision (default: 9f2fe66, before the reason series lost their zeros,
# and the working tree): head series, head chunks and Prometheus's RSS
# (docs/scaling.md: "What it costs your Prometheus"). PROMCOST_REVS lists
# other revisions; HOSTS, INTERVAL, DURATION and PROMETHEUS are passed on.
PROMCOST_REVS ?=
.PHONY: bench-prometheus
bench-prometheus:
	GO="$(GO)" testdata/bench/prometheus-cost.sh $(PROMCOST_REVS)

# The cold start of the real binary measured from outside: a fresh exporter
# with default settings in front of a simulated fleet (HOSTS, default 5,000),
# scraped with Prometheus's header (HEADER, default 30 s) back to back;
# hosts Ready after each scrape, the exporter's CPU and peak memory, per
# revision (COLDSTART_REVS, default the working tree; "HEAD ." compares).
# PROFILE=dir keeps a CPU profile of the first two scrapes
# (docs/scaling.md: "Cold start").
COLDSTART_REVS ?=
.PHONY: bench-coldstart
bench-coldstart:
	GO="$(GO)" testdata/bench/coldstart.sh $(COLDSTART_REVS)

# Fuzzing of every parser of untrusted input, one target after the other,
# FUZZTIME each (make fuzz FUZZTIME=10m for a long run). A crasher is saved
# under the package's testdata/fuzz and then replayed by every go test.
FUZZTIME ?= 10s
FUZZ_TIMEOUT ?= 30m
FUZZ_TARGETS := \
	./internal/engine:FuzzScrapeTimeout \
	./collector/kvm:FuzzFrameConn \
	./collector/kvm:FuzzLibvirtReply \
	./collector/kvm:FuzzSSHMaterial \
	./collector/gcp:FuzzErrorBody \
	./collector/gcp:FuzzCredentialsJSON \
	./collector/gcp:FuzzRegionAnswer \
	./collector/kubernetes:FuzzKubeconfig \
	./collector/kubernetes:FuzzExecCredential \
	./provider:FuzzLimitedBody \
	./config:FuzzParse \
	./config:FuzzLoad \
	./config:FuzzDecodeLarge \
	./cmd/provider_health_exporter:FuzzProbeQuery \
	./internal/quantity:FuzzParse \
	./collector/kubernetes:FuzzServerAnswers \
	./cmd/provider_health_exporter:FuzzSDHost
.PHONY: fuzz
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; echo "fuzz $$pkg $$name ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) -timeout $(FUZZ_TIMEOUT) $$pkg; \
	done

# Debian packages, libvirt's users and the pinned Go tools (root; a no-op
# when all is there).
.PHONY: deps
deps:
	testdata/install-deps.sh

.PHONY: demo
demo: deps
	testdata/demo/demo.sh

# --- integration tests against real components ---------------------------

.PHONY: integration
integration: integration-kvm integration-kubernetes integration-demo integration-e2e integration-browser

.PHONY: integration-kvm
integration-kvm:
	testdata/kvm/run-integration.sh

.PHONY: integration-kubernetes
integration-kubernetes:
	testdata/kubernetes/run-integration.sh

# make demo's script run to the first Ready of each kind and stopped as
# Ctrl-C stops it, every process it started checked gone (root). After
# integration-kubernetes, which leaves kube-apiserver built; the test runs
# the demo once more with a build that has not ended.
.PHONY: integration-demo
integration-demo:
	testdata/kubernetes/build-apiserver.sh >/dev/null
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -tags demo -v ./testdata/demo/

.PHONY: integration-e2e
integration-e2e:
	testdata/e2e/run-e2e.sh

# The status page in headless Chromium (Debian's chromium) against the real
# binary (build tag browser), at 1366x768: a small fleet, a fleet of 1,000
# targets, and make demo's ten entries (the demo's script, as root, with
# kube-apiserver built: after integration-kubernetes, like integration-demo),
# and, in process, a target with as many failure domains as an entry may have.
# It fails, never skips, without Chromium. The screenshots and the logs of
# the exporter, the demo and Chromium of the last run are kept under
# $(BROWSER_ARTIFACTS)/_artifacts.
BROWSER_ARTIFACTS ?= $(CURDIR)/.artifacts/browser
.PHONY: integration-browser
integration-browser:
	testdata/kubernetes/build-apiserver.sh >/dev/null
	rm -rf $(BROWSER_ARTIFACTS)/_artifacts && mkdir -p $(BROWSER_ARTIFACTS)
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -tags browser -run '^TestStatusPage(InBrowser|FleetInBrowser|DemoInBrowser|DomainsInBrowser)$$' -v \
	  -artifacts -outputdir $(BROWSER_ARTIFACTS) ./cmd/provider_health_exporter/

# --- mixin ----------------------------------------------------------------
#
# jsonnet tools and jsonnet-bundler come pinned from tools/go.mod; promtool
# and amtool from Debian's prometheus and prometheus-alertmanager packages,
# and Prometheus 3's promtool from its Go module (build-prometheus.sh).

JSONNET      := $(TOOLS) jsonnet -J mixin
JSONNETFMT   := $(TOOLS) jsonnetfmt -n 2 --max-blank-lines 2 --string-style s --comment-style s
JSONNETLINT  := $(TOOLS) jsonnet-lint -J mixin
PROMTOOL     ?= promtool
# Prometheus 3, built once per machine into ~/.cache: prints the paths of
# prometheus and promtool.
PROMETHEUS3  := testdata/prometheus/build-prometheus.sh
AMTOOL       ?= amtool
MIXIN_SRCS    = $(shell find mixin -name '*.jsonnet' -o -name '*.libsonnet')

# mixin-generate OUT=dir writes every generated file under dir, in the same
# layout as the repository, so mixin-lint can diff a fresh copy against the
# committed one.
# The Helm chart gets copies of the alerts and dashboards under its files/
# (Helm reads no file outside the chart).
OUT ?= .
CHART := deploy/helm/provider-health-exporter
KUBE_PROMETHEUS := deploy/kubernetes/components/kube-prometheus
.PHONY: mixin-generate
mixin-generate:
	@mkdir -p $(OUT)/mixin/dashboards_out $(OUT)/mixin/tests/multicluster $(OUT)/deploy/kubernetes/components/prometheus-operator $(OUT)/$(KUBE_PROMETHEUS) $(OUT)/$(CHART)/files/dashboards
	$(JSONNET) -S mixin/alerts.jsonnet > $(OUT)/mixin/alerts.yaml
	$(JSONNET) -S mixin/tests/multicluster/alerts.jsonnet > $(OUT)/mixin/tests/multicluster/alerts.yaml
	$(JSONNET) -m $(OUT)/mixin/dashboards_out mixin/dashboards.jsonnet > /dev/null
	$(JSONNET) -S mixin/prometheusrule.jsonnet > $(OUT)/deploy/kubernetes/components/prometheus-operator/prometheusrule.yaml
	$(JSONNET) -S mixin/dashboards-configmap.jsonnet > $(OUT)/$(KUBE_PROMETHEUS)/dashboards-configmap.yaml
	cp $(OUT)/mixin/alerts.yaml $(OUT)/$(CHART)/files/alerts.yaml
	cp $(OUT)/mixin/dashboards_out/*.json $(OUT)/$(CHART)/files/dashboards/

.PHONY: mixin mixin-lint mixin-test
mixin:
	rm -f mixin/dashboards_out/*.json $(CHART)/files/dashboards/*.json
	$(MAKE) --no-print-directory mixin-generate OUT=.

mixin-lint:
	$(JSONNETFMT) --test $(MIXIN_SRCS)
	@for f in $(MIXIN_SRCS); do echo "jsonnet-lint $$f"; $(JSONNETLINT) $$f || exit 1; done
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  $(MAKE) --no-print-directory mixin-generate OUT=$$tmp && \
	  for f in mixin/alerts.yaml mixin/tests/multicluster/alerts.yaml deploy/kubernetes/components/prometheus-operator/prometheusrule.yaml \
	      $(KUBE_PROMETHEUS)/dashboards-configmap.yaml $(CHART)/files/alerts.yaml; do \
	    diff -u $$f $$tmp/$$f || { echo "$$f is stale: run make mixin"; exit 1; }; done && \
	  for d in mixin/dashboards_out $(CHART)/files/dashboards; do \
	    diff -ru $$d $$tmp/$$d || { echo "$$d is stale: run make mixin"; exit 1; }; done
	$(PROMTOOL) check rules mixin/alerts.yaml mixin/tests/multicluster/alerts.yaml
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  $(GO) build -modfile=tools/go.mod -o $$tmp/jb github.com/jsonnet-bundler/jsonnet-bundler/cmd/jb && \
	  $(GO) build -modfile=tools/go.mod -o $$tmp/jsonnet github.com/google/go-jsonnet/cmd/jsonnet && \
	  testdata/mixin/vendor-check.sh $$tmp/jb $$tmp/jsonnet
	$(GO) test -count=1 -timeout 10m -tags promtool -run 'TestGoldenMetricsRead|TestMetricNames|TestMatcherProblems|TestExpressions|TestDashboard|TestAlerts|TestMultiClusterAlerts|TestGrafanaSchema' ./mixin/
	$(PROMTOOL) check config deploy/prometheus/prometheus.yml deploy/prometheus/prometheus-probe.yml deploy/prometheus/prometheus-sharded.yml
	$(AMTOOL) check-config deploy/prometheus/alertmanager.yml

# The rule tests run with Debian's promtool (Prometheus 2.42) and with
# Prometheus 3's; those under tests/multicluster test the alerts rendered with
# showMultiCluster, as a global ruler over several clusters gets them.
MIXIN_RULE_TESTS = mixin/tests/*.yaml mixin/tests/multicluster/*_test.yaml
mixin-test: mixin-lint
	$(PROMTOOL) test rules $(MIXIN_RULE_TESTS)
	"$$($(PROMETHEUS3) | sed -n 2p)" test rules $(MIXIN_RULE_TESTS)
	$(GO) test -count=1 -timeout 10m -tags promtool -run 'TestRuleTestsCatchBrokenRules|TestMultiClusterRuleTestsCatchBrokenRules' ./mixin/
	@# The Helm chart's PrometheusRule with an alert's severity and for overridden from values.
	$(GO) -C $(VALIDATE) test -count=1 -timeout 10m -tags promtool -run 'TestChartOverriddenRuleWithPromtool' ./...
