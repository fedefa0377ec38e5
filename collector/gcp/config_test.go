package gcp

import (
	"strings"
	"testing"
)

func TestParseSourceImage(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]SourceImage{
		"projects/debian-cloud/global/images/family/debian-12":             {Project: "debian-cloud", Family: "debian-12"},
		"projects/debian-cloud/global/images/debian-12-bookworm-v20240110": {Project: "debian-cloud", Image: "debian-12-bookworm-v20240110"},
		"projects/example.com:proxies/global/images/proxy-base":            {Project: "example.com:proxies", Image: "proxy-base"},
		"projects/crawl-prod-123/global/images/family/p":                   {Project: "crawl-prod-123", Family: "p"},
	} {
		got, err := ParseSourceImage(in)
		if err != nil || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{
		"",
		"debian-12",
		"projects/debian-cloud/global/images/",
		"projects/debian-cloud/global/images/family/",
		"projects/debian-cloud/images/debian-12",
		"projects/Debian-Cloud/global/images/debian-12",
		"projects/debian-cloud/global/images/Debian-12",
		"projects/debian-cloud/global/images/family/debian-12/extra",
		"https://www.googleapis.com/compute/v1/projects/debian-cloud/global/images/debian-12",
		"projects/debian-cloud/zones/us-central1-a/images/debian-12",
		"projects/debian-cloud/global/images/debian-12-",
	} {
		if got, err := ParseSourceImage(in); err == nil {
			t.Errorf("%q: accepted as %+v", in, got)
		}
	}
}

// TestGCPPlainHTTPEndpoint: a plain-http endpoint would carry the access
// token in clear text, so only a loopback address may have one.
func TestGCPPlainHTTPEndpoint(t *testing.T) {
	t.Parallel()
	for endpoint, ok := range map[string]bool{
		"https://compute.googleapis.com": true,
		"https://10.0.0.1:8443":          true,
		"http://127.0.0.1:8080":          true,
		"http://127.1.2.3":               true,
		"http://[::1]:8080":              true,
		"http://localhost:8080":          false,
		"http://compute.googleapis.com":  false,
		"http://10.0.0.1":                false,
		"http://[::ffff:10.0.0.1]:80":    false,
	} {
		g := &Entry{Name: "crawl-prod", Project: "crawl-prod-123", Endpoint: endpoint}
		err := g.Validate(`gcp[0] "crawl-prod"`)
		if ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "endpoint: \""+endpoint+"\" is plain http")) {
			t.Errorf("%s: %v, want accepted=%v", endpoint, err, ok)
		}
	}
}
