// Package validate checks the manifests under deploy/kubernetes and the Helm
// chart under deploy/helm: it renders the kustomizations with the kustomize
// Go API and the chart with the Helm SDK (package chart), and decodes every
// object strictly into its Go type, the Prometheus Operator's included. Its
// integration tests (build tag integration, run by
// testdata/kubernetes/run-integration.sh) dry-run them on a real
// kube-apiserver. It is a module of its own so that kustomize, Helm and the
// operator's API stay out of the exporter's dependencies. `make test` runs
// it.
package validate

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Render builds the kustomization in dir as `kubectl kustomize dir` does and
// returns the resources as one multi-document YAML stream. With components,
// it builds an overlay of dir with those components, the one
// docs/deployment.md: "Prometheus Operator" shows.
func Render(dir string, components ...string) ([]byte, error) {
	return RenderInNamespace("", dir, components...)
}

// RenderInNamespace is Render through an overlay that sets namespace (when
// not empty), as a user who runs the exporter elsewhere writes it.
func RenderInNamespace(namespace, dir string, components ...string) ([]byte, error) {
	if len(components) > 0 || namespace != "" {
		overlay, err := os.MkdirTemp("", "phe-overlay-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(overlay)
		// kustomize takes neither absolute roots nor roots that contain
		// the overlay: the paths are relative to a temporary directory.
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n"
		for i, p := range append([]string{dir}, components...) {
			rel, err := relative(overlay, p)
			if err != nil {
				return nil, err
			}
			if i == 1 {
				k += "components:\n"
			}
			k += "  - " + rel + "\n"
		}
		if namespace != "" {
			k += "namespace: " + namespace + "\n"
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
			return nil, err
		}
		dir = overlay
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return out, nil
}

func relative(from, p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("kustomization %s: %w", p, err)
	}
	return filepath.Rel(from, a)
}
