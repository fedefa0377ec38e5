// Package chart renders and lints a Helm chart with the Helm SDK, for the
// tests of deploy/helm/provider-health-exporter in package validate. A
// package of its own so that kustomize-build, which the kubernetes
// provider's integration test runs, does not link Helm.
package chart

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/release"
)

// Template renders the chart in dir as `helm template --namespace namespace
// name dir --values values` does (an install, the default capabilities,
// values checked against values.schema.json) and
// returns its manifests as one multi-document YAML stream, in the order of
// the templates' paths. A template that refers to a value the chart does not
// define is an error (Helm's strict rendering), so a typo in a template
// cannot hide behind an empty string.
func Template(ctx context.Context, dir, name, namespace string, values map[string]any) ([]byte, error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	// As helm template and helm install: the values are checked against
	// values.schema.json first.
	vals, err := util.ToRenderValuesWithSchemaValidation(ch, values, common.ReleaseOptions{
		Name: name, Namespace: namespace, Revision: 1, IsInstall: true,
	}, common.DefaultCapabilities.Copy(), false)
	if err != nil {
		return nil, fmt.Errorf("chart %s values: %w", dir, err)
	}
	files, err := engine.Engine{Strict: true}.RenderWithContext(ctx, ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render chart %s: %w", dir, err)
	}
	var out bytes.Buffer
	for _, f := range slices.Sorted(maps.Keys(files)) {
		// Partials (_helpers.tpl) render to nothing; NOTES.txt is shown to
		// the user, not applied.
		if !strings.HasSuffix(f, ".yaml") || strings.HasPrefix(path.Base(f), "_") {
			continue
		}
		text := strings.TrimSpace(files[f])
		if text == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", f, text)
	}
	return out.Bytes(), nil
}

// Lint runs `helm lint --strict` on the chart in dir with values: warnings
// count as errors. It returns every message of severity warning or worse.
func Lint(dir string, values map[string]any) []error {
	l := action.NewLint()
	l.Strict = true
	l.Namespace = "provider-health"
	res := l.Run([]string{dir}, values)
	return res.Errors
}

// KubeVersion is the Kubernetes version a client-side install assumes:
// the kube-apiserver of the integration tests.
const KubeVersion = "v1.37.2"

// Install runs `helm install --dry-run=client --kube-version KubeVersion
// --namespace namespace name dir --values values` with the Helm SDK's
// install action: what a user's helm
// install does up to talking to a cluster (values.schema.json, rendering,
// NOTES.txt). It returns the release's manifest and notes.
func Install(ctx context.Context, dir, name, namespace string, values map[string]any) (manifest, notes string, err error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", "", fmt.Errorf("load chart %s: %w", dir, err)
	}
	cfg := action.NewConfiguration()
	cfg.SetLogger(slog.DiscardHandler)
	in := action.NewInstall(cfg)
	in.DryRunStrategy = action.DryRunClient
	in.ReleaseName, in.Namespace = name, namespace
	// A client-side dry-run knows no cluster: Helm would check the chart's
	// kubeVersion against its default, v1.20, as `helm install
	// --dry-run=client` without --kube-version does. The tests' API server
	// is v1.37.
	if in.KubeVersion, err = common.ParseKubeVersion(KubeVersion); err != nil {
		return "", "", err
	}
	rel, err := in.RunWithContext(ctx, ch, values)
	if err != nil {
		return "", "", fmt.Errorf("helm install %s: %w", dir, err)
	}
	acc, err := release.NewAccessor(rel)
	if err != nil {
		return "", "", fmt.Errorf("helm install %s: %w", dir, err)
	}
	return acc.Manifest(), acc.Notes(), nil
}
