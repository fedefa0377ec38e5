// Command generate writes the files generated from the table of kinds
// (internal/kinds), as `make generate` runs it from the repository's
// root: the configuration's JSON Schema and the chart's copy of it, and
// the parts of the README, docs/metrics.md, docs/configuration.md and
// mixin/runbook.md between their markers (internal/docgen). It writes
// only the files that change and names them; it fails, writing nothing,
// when a kind's docs or a marker are wrong, naming what to fix.
//
//	go run ./internal/generate [-root DIR]
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/egress-proxies/provider_health_exporter/internal/docgen"
	"github.com/egress-proxies/provider_health_exporter/internal/kinds"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "generate:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	if _, err := os.Stat(filepath.Join(root, "internal", "generate")); err != nil {
		return fmt.Errorf("%s is not the repository's root: run make generate, or give -root: %w", root, err)
	}
	table, err := kinds.Table()
	if err != nil {
		return err
	}
	files, probs, err := docgen.Files(root, table)
	if err != nil {
		return err
	}
	if len(probs) > 0 {
		msgs := make([]string, len(probs))
		for i, p := range probs {
			msgs[i] = p.String()
		}
		return errors.New("nothing written:\n" + strings.Join(msgs, "\n"))
	}
	stale, err := docgen.Stale(root, files)
	if err != nil {
		return err
	}
	for _, f := range files {
		for _, s := range stale {
			if s != f.Path {
				continue
			}
			path := filepath.Join(root, filepath.FromSlash(f.Path))
			if err := os.WriteFile(path, f.Data, 0o644); err != nil {
				return err
			}
			fmt.Println("wrote", f.Path)
		}
	}
	return nil
}
