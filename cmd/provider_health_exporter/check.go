package main

import (
	"fmt"
	"io"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// checkConfig implements --config.check: the loader's verdict on the file,
// then a warning for each referenced file whose contents a check would
// reject. Those do not fail the check, because at run time they only make
// their own target not ready.
func checkConfig(kinds []provider.Kind, path string, stdout, stderr io.Writer) int {
	cfg, err := config.Load(path, provider.Sections(kinds))
	if err != nil {
		fmt.Fprintf(stderr, "FAILED: %v\n", err)
		return 1
	}
	for _, w := range provider.FileWarnings(kinds, cfg) {
		fmt.Fprintf(stderr, "WARNING: %s\n", w)
	}
	fmt.Fprintf(stdout, "SUCCESS: %s: %s\n", path, cfg.Summary())
	return 0
}
