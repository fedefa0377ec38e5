package main

import (
	"fmt"
	"sync"

	"github.com/egress-proxies/provider_health_exporter/config"
)

// configText is /config's answer for one loaded configuration, rendered
// by the first request after the load and served from those bytes to
// every later one: rendering a 5,000-host configuration as YAML costs
// tens of megabytes, and forty requests at once must not each pay it
// (docs/security.md: "Strings, labels and pages"). A configuration nobody
// asks for is never rendered.
type configText struct {
	cfg  *config.Config
	once sync.Once
	text []byte
	err  error
}

func (c *configText) render() ([]byte, error) {
	c.once.Do(func() {
		c.text, c.err = c.cfg.RenderYAML()
		if c.err != nil {
			c.err = fmt.Errorf("rendering the configuration: %w", c.err)
		}
	})
	return c.text, c.err
}
