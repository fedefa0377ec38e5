package gcp

// The gcp section of the configuration file (docs/configuration.md:
// "GCP"): an entry's keys, their defaults, how Load validates them and
// what the JSON Schema says of them.

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sync"

	"github.com/egress-proxies/provider_health_exporter/config"
	"github.com/egress-proxies/provider_health_exporter/internal/boundedfile"
)

// DefaultFilter selects the operator's proxy instances when an entry sets
// no filter.
const DefaultFilter = `labels.managed-by = "egress-proxies-operator"`

// Section is the gcp section of the configuration file: one entry a
// project.
func Section() config.Section {
	return config.Section{Kind: Name, New: func() config.Entry { return &Entry{Filter: DefaultFilter} }}
}

// Entry is one entry of the gcp section: one project.
type Entry struct {
	Name            string `yaml:"name"`
	Project         string `yaml:"project"`
	CredentialsFile string `yaml:"credentials_file,omitempty"`
	Filter          string `yaml:"filter,omitempty"`
	Endpoint        string `yaml:"endpoint,omitempty"`
	// Regions and MinQuotaHeadroom are the optional quota check
	// (docs/configuration.md: "GCP"), set together: a quota metric
	// (CPUS) maps to the least limit - usage each region must have.
	Regions          []string           `yaml:"regions,omitempty"`
	MinQuotaHeadroom map[string]float64 `yaml:"min_quota_headroom,omitempty"`
	// SourceImage is the optional image check (docs/configuration.md:
	// "GCP"): projects/P/global/images/NAME or
	// projects/P/global/images/family/F.
	SourceImage  string `yaml:"source_image,omitempty"`
	config.Check `yaml:",inline"`
}

// EntryName implements config.Entry.
func (g *Entry) EntryName() string { return g.Name }

// ResolvePaths implements config.Entry.
func (g *Entry) ResolvePaths(join func(*string)) { join(&g.CredentialsFile) }

// TargetCount implements config.Entry: one Compute API.
func (g *Entry) TargetCount() int { return 1 }

// Validate implements config.Entry.
func (g *Entry) Validate(where string) error {
	if g.Project == "" {
		return fmt.Errorf("%s: project: missing (required)", where)
	}
	if g.Endpoint != "" {
		u, err := url.Parse(g.Endpoint)
		if err != nil {
			return fmt.Errorf("%s: endpoint: %w", where, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: endpoint: %q is not an http(s) URL", where, g.Endpoint)
		}
		if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
			return fmt.Errorf("%s: endpoint: %q is plain http, which would send the OAuth access token in clear text: use https (plain http is accepted only to a loopback address such as 127.0.0.1, for tests)", where, g.Endpoint)
		}
	}
	if err := g.validateQuotas(where); err != nil {
		return err
	}
	if g.SourceImage != "" {
		if _, err := ParseSourceImage(g.SourceImage); err != nil {
			return fmt.Errorf("%s: source_image: %w", where, err)
		}
	}
	return config.Readable(where, "credentials_file", boundedfile.Credentials, g.CredentialsFile)
}

// validateQuotas checks the optional quota keys: both or neither, region
// and metric names as Compute writes them, no negative minimum, no region
// twice.
func (g *Entry) validateQuotas(where string) error {
	switch {
	case len(g.Regions) > 0 && len(g.MinQuotaHeadroom) == 0:
		return fmt.Errorf("%s: min_quota_headroom: missing (regions are read only for its quotas)", where)
	case len(g.Regions) == 0 && len(g.MinQuotaHeadroom) > 0:
		return fmt.Errorf("%s: regions: missing (required by min_quota_headroom)", where)
	}
	if len(g.Regions) > MaxRegions {
		return fmt.Errorf("%s: regions: %d regions, more than the %d an entry may check (Compute has about 40)", where, len(g.Regions), MaxRegions)
	}
	seen := map[string]int{}
	for i, r := range g.Regions {
		if !gcpRegion.MatchString(r) {
			return fmt.Errorf("%s: regions[%d]: %q is not a region name like us-central1", where, i, r)
		}
		if j, dup := seen[r]; dup {
			return fmt.Errorf("%s: regions[%d]: %q is already regions[%d]", where, i, r, j)
		}
		seen[r] = i
	}
	for _, m := range slices.Sorted(maps.Keys(g.MinQuotaHeadroom)) {
		v := g.MinQuotaHeadroom[m]
		if !gcpQuotaMetric.MatchString(m) {
			return fmt.Errorf("%s: min_quota_headroom: %q is not a Compute quota metric like CPUS or IN_USE_ADDRESSES", where, m)
		}
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s: min_quota_headroom %s: %v is not a non-negative number", where, m, v)
		}
	}
	return nil
}

// gcpRegion and gcpQuotaMetric are how Compute writes a region's name and
// a quota's metric.
var (
	gcpRegion      = regexp.MustCompile(`^[a-z]+(-[a-z0-9]+)+$`)
	gcpQuotaMetric = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
)

// MaxRegions is the most regions one gcp entry may list
// (docs/security.md: "What the exporter bounds"): every check reads each
// of them, and Compute has about 40, so a longer list is a mistake that
// would cost a read request per region per check.
const MaxRegions = 64

// loopbackHost tells whether host is a loopback IP address, the only
// place a plain-http endpoint may send a token to: it never leaves the
// machine. A name is not resolved here, so "localhost" does not count.
func loopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SourceImage is a parsed source_image: an image by name, or the image
// an image family points to.
type SourceImage struct {
	Project string
	// Image is set for projects/P/global/images/NAME, Family for
	// projects/P/global/images/family/F.
	Image, Family string
}

// sourceImagePattern is the two forms of source_image. A project ID is
// lowercase letters, digits and hyphens, optionally behind a domain
// ("example.com:proj"); image and family names are RFC 1035 labels.
// Compiled when first used: its {0,61} repetitions make a program that a
// replica without GCP entries would otherwise keep from start to end
// (docs/scaling.md: "What a kind costs a replica that does not use it").
var sourceImagePattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^projects/((?:[a-z0-9.-]+:)?[a-z][-a-z0-9]{0,61}[a-z0-9])/global/images/(family/)?([a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)$`)
})

// ParseSourceImage reads a source_image value.
func ParseSourceImage(s string) (SourceImage, error) {
	m := sourceImagePattern().FindStringSubmatch(s)
	if m == nil {
		return SourceImage{}, fmt.Errorf("%q is neither projects/PROJECT/global/images/NAME nor projects/PROJECT/global/images/family/FAMILY", s)
	}
	if m[2] != "" {
		return SourceImage{Project: m[1], Family: m[3]}, nil
	}
	return SourceImage{Project: m[1], Image: m[3]}, nil
}

// SchemaKeywords implements config.SchemaKeywordser.
func (Entry) SchemaKeywords() map[string]config.Keywords {
	return map[string]config.Keywords{
		"": {
			"required": []string{"project"},
			"allOf": []any{
				config.Keywords{
					"if":   config.Keywords{"required": []string{"regions"}, "properties": map[string]any{"regions": config.Keywords{"minItems": 1}}},
					"then": config.Keywords{"required": []string{"min_quota_headroom"}, "properties": map[string]any{"min_quota_headroom": config.Keywords{"minProperties": 1}}},
				},
				config.Keywords{
					"if":   config.Keywords{"required": []string{"min_quota_headroom"}, "properties": map[string]any{"min_quota_headroom": config.Keywords{"minProperties": 1}}},
					"then": config.Keywords{"required": []string{"regions"}, "properties": map[string]any{"regions": config.Keywords{"minItems": 1}}},
				},
			},
		},
		"project":          {"minLength": 1, "description": "ID of the Google Cloud project."},
		"credentials_file": {"description": "Service account key or external account file; empty: Application Default Credentials."},
		"filter":           {"description": "Compute API filter of the proxy instances (default labels.managed-by = \"egress-proxies-operator\")."},
		"endpoint": {
			"description": "Compute API endpoint; default https://compute.googleapis.com/compute/v1/. Plain http only to a loopback address.",
			"pattern":     `^([Hh][Tt][Tt][Pp][Ss]://[^/?#]+([/?#].*)?|[Hh][Tt][Tt][Pp]://(127\.[0-9.]+|\[[0-9a-fA-F:.]+\])(:[0-9]+)?([/?#].*)?)$`,
		},
		"regions": {
			"maxItems":    MaxRegions,
			"uniqueItems": true,
			"items":       config.Keywords{"pattern": gcpRegion.String()},
			"description": "Regions whose quotas min_quota_headroom checks, set together with it; also the entry's failure domains: capacity, proxies and capacity after losing each region.",
		},
		"min_quota_headroom": {
			"description":          "Least limit - usage per Compute quota metric (CPUS: 8) in every region; set together with regions.",
			"propertyNames":        config.Keywords{"pattern": gcpQuotaMetric.String()},
			"additionalProperties": config.Keywords{"type": "number", "minimum": 0},
		},
		"source_image": {
			"pattern":     sourceImagePattern().String(),
			"description": "Image the proxies boot: projects/P/global/images/NAME or projects/P/global/images/family/F.",
		},
	}
}
