package validate

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	corev1 "k8s.io/api/core/v1"
)

// TestScrapeConfigDiscoversFromTheService decodes the Operator component's
// ScrapeConfig strictly into the operator's v1alpha1 type and checks that it
// discovers from the exporter's /sd through the Service, that its series get
// the job the ServiceMonitor's (and so every alert's) have, with the
// discovered labels that the exporter's series repeat dropped, and that the
// ServiceMonitor beside it checks no provider, so that none is checked
// twice.
func TestScrapeConfigDiscoversFromTheService(t *testing.T) {
	if _, ok := render(t, base)["ScrapeConfig"]; ok {
		t.Error("the base renders a ScrapeConfig: a cluster without the operator's CRDs would refuse it")
	}
	objs := render(t, base, operator)
	var sc monitoringv1alpha1.ScrapeConfig
	strict(t, objs["ScrapeConfig"], &sc)
	var sm monitoringv1.ServiceMonitor
	strict(t, objs["ServiceMonitor"], &sm)
	var svc corev1.Service
	strict(t, objs["Service"], &svc)

	if sc.Namespace != svc.Namespace {
		t.Errorf("ScrapeConfig in %q, Service in %q: keep them together", sc.Namespace, svc.Namespace)
	}
	if len(sc.Spec.HTTPSDConfigs) != 1 || len(sc.Spec.StaticConfigs) != 0 {
		t.Fatalf("ScrapeConfig has %d httpSDConfigs and %d staticConfigs, want the one /sd of the exporter", len(sc.Spec.HTTPSDConfigs), len(sc.Spec.StaticConfigs))
	}
	u, err := url.Parse(string(sc.Spec.HTTPSDConfigs[0].URL))
	if err != nil {
		t.Fatal(err)
	}
	var hosts []string
	for _, p := range svc.Spec.Ports {
		hosts = append(hosts, fmt.Sprintf("%s.%s.svc:%d", svc.Name, svc.Namespace, p.Port))
	}
	if u.Scheme != "http" || !slices.Contains(hosts, u.Host) || u.Path != "/sd" {
		t.Errorf("ScrapeConfig discovers from %s, want http://<one of %v>/sd", u, hosts)
	}
	if sc.Spec.MetricsPath != nil || len(sc.Spec.Params) != 0 {
		t.Errorf("ScrapeConfig sets metricsPath %v or params %v: /sd gives each target's", sc.Spec.MetricsPath, sc.Spec.Params)
	}
	if sc.Spec.ScrapeInterval == nil || sc.Spec.ScrapeTimeout == nil {
		t.Fatal("ScrapeConfig: scrapeInterval and scrapeTimeout must be set")
	}
	interval, err1 := time.ParseDuration(string(*sc.Spec.ScrapeInterval))
	timeout, err2 := time.ParseDuration(string(*sc.Spec.ScrapeTimeout))
	if err1 != nil || err2 != nil || timeout <= 0 || timeout > interval {
		t.Errorf("ScrapeConfig interval %v, scrapeTimeout %v: the timeout at most the interval", *sc.Spec.ScrapeInterval, *sc.Spec.ScrapeTimeout)
	}

	var job *string
	dropped := false
	for _, r := range sc.Spec.RelabelConfigs {
		switch {
		case r.TargetLabel == "job":
			job = r.Replacement
		case r.Action == "labeldrop":
			re := regexp.MustCompile("^(?:" + r.Regex + ")$")
			dropped = re.MatchString("provider") && re.MatchString("name") && re.MatchString("target") && !re.MatchString("instance")
		}
	}
	if job == nil || *job != operatorJob(t, sm, svc) {
		t.Errorf("ScrapeConfig sets job %v; the ServiceMonitor's series, which the alerts select, have job=%q", job, operatorJob(t, sm, svc))
	}
	if !dropped {
		t.Error("ScrapeConfig keeps the discovered provider, name and target labels: the series would get exported_provider, exported_name and exported_target")
	}
	if ep := sm.Spec.Endpoints; len(ep) != 1 || !slices.Equal(ep[0].Params["collect[]"], []string{"exporter"}) {
		t.Errorf("ServiceMonitor params %v: with the ScrapeConfig it must scrape collect[]=exporter only, or every provider is checked twice", ep)
	}
}
