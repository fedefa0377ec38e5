package main

import (
	"github.com/egress-proxies/provider_health_exporter/collector"
	"github.com/egress-proxies/provider_health_exporter/config"
)

// reload loads the config file and, if it is valid and every provider could
// be built, puts it in force. Otherwise the running config stays.
func (x *exporter) reload() error {
	x.reloadMu.Lock()
	defer x.reloadMu.Unlock()
	cfg, err := config.LoadSections(x.configFile, collector.Sections(x.kinds))
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
	x.logger.Info("loaded config", "file", x.configFile, "summary", cfg.Summary())
	return nil
}

func (x *exporter) config() *config.Config {
	x.cfgMu.RLock()
	defer x.cfgMu.RUnlock()
	return x.cfg
}
