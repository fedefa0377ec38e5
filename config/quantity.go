package config

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/egress-proxies/provider_health_exporter/internal/quantity"
)

// ParseBytes reads a byte quantity of the file (min_pool_available,
// min_free_memory): plain bytes ("1073741824") or a binary unit, in
// Kubernetes' form ("4Gi") or with a trailing B ("20GiB"). Decimal units
// ("20G", "20GB") are refused: which one was meant is a guess.
// k8s.io/apimachinery's resource.Quantity does the parsing.
func ParseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, errors.New("empty quantity: want bytes or a binary unit (20GiB, 4Gi)")
	}
	num := t
	if strings.HasSuffix(t, "iB") {
		num = strings.TrimSuffix(t, "B")
	}
	if !strings.ContainsAny(num[:1], "0123456789.+-") {
		// resource.ParseQuantity reads a bare "Gi" as 0.
		return 0, fmt.Errorf("quantity %q has no number; want bytes or a binary unit (20GiB, 4Gi)", s)
	}
	// The bounded parser first: resource.ParseQuantity never returns on
	// some values ("1e-1000000000"); its own words for the rest.
	if _, err := quantity.Parse(num); errors.Is(err, quantity.ErrMagnitude) {
		return 0, fmt.Errorf("quantity %q: %w", s, quantity.ErrMagnitude)
	}
	q, err := resource.ParseQuantity(num)
	if err != nil {
		return 0, fmt.Errorf("quantity %q: %w; want bytes or a binary unit (20GiB, 4Gi)", s, err)
	}
	if q.Sign() < 0 {
		return 0, fmt.Errorf("quantity %q is negative", s)
	}
	if q.Format != resource.BinarySI && !allDigits(num) {
		if strings.ContainsAny(num, "kMGTPEm") || strings.ContainsAny(num, "eE") {
			return 0, fmt.Errorf("quantity %q: use a binary unit (Ki, Mi, Gi, Ti or KiB, MiB, GiB, TiB) or plain bytes", s)
		}
		return 0, fmt.Errorf("quantity %q is not a whole number of bytes", s)
	}
	if q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.BinarySI)) >= 0 {
		// ParseQuantity clamps what is larger to this.
		return 0, fmt.Errorf("quantity %q is too large", s)
	}
	v := q.Value() // rounded up
	if q.Cmp(*resource.NewQuantity(v, resource.BinarySI)) != 0 {
		return 0, fmt.Errorf("quantity %q is not a whole number of bytes", s)
	}
	return uint64(v), nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// byteMinimum parses an optional byte minimum of the file into *dst; an
// empty value leaves it 0, which means not set.
func byteMinimum(where, field, value string, dst *uint64) error {
	if value == "" {
		return nil
	}
	n, err := ParseBytes(value)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", where, field, err)
	}
	*dst = n
	return nil
}
