package main

import (
	"runtime/debug"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/provider"
)

// reload loads the config file and, if it is valid and every provider could
// be built, puts it in force. Otherwise the running config stays.
func (x *exporter) reload() error {
	x.reloadMu.Lock()
	defer x.reloadMu.Unlock()
	cfg, err := config.Load(x.configFile, provider.Sections(x.kinds))
	if err == nil {
		err = x.engine.Load(x.entries(cfg, x.logger))
	}
	if err != nil {
		x.reloadOK.Set(0)
		return err
	}
	x.cfgMu.Lock()
	x.cfg, x.cfgText = cfg, &configText{cfg: cfg}
	x.cfgMu.Unlock()
	x.reloadOK.Set(1)
	x.reloadTime.SetToCurrentTime()
	// Parsing a large file (16 MiB, 100,000 hosts) leaves hundreds of
	// megabytes of garbage: returned to the system now, the resident size
	// after a reload is what the new configuration needs, not the peak of
	// reading it (docs/scaling.md: "Large configurations").
	debug.FreeOSMemory()
	x.logger.Info("loaded config", "file", x.configFile, "summary", cfg.Summary())
	return nil
}

func (x *exporter) config() *config.Config {
	x.cfgMu.RLock()
	defer x.cfgMu.RUnlock()
	return x.cfg
}
