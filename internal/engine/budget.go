package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// ScrapeTimeoutHeader is the header Prometheus sends with the scrape_timeout.
const ScrapeTimeoutHeader = "X-Prometheus-Scrape-Timeout-Seconds"

// ParseScrapeTimeout parses the value of ScrapeTimeoutHeader. An empty value
// means there is no header and yields 0.
func ParseScrapeTimeout(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	// ParseFloat takes Go literal syntax, digit separators included:
	// "1_0" would be 10, which no Prometheus sends.
	if strings.ContainsRune(v, '_') {
		return 0, fmt.Errorf("parse %s %s: not a number of seconds", ScrapeTimeoutHeader, provider.Echo(v))
	}
	secs, err := strconv.ParseFloat(v, 64)
	if err != nil {
		// Not ParseFloat's error: it repeats the whole value.
		what := "not a number of seconds"
		if errors.Is(err, strconv.ErrRange) {
			what = "out of range"
		}
		return 0, fmt.Errorf("parse %s %s: %s", ScrapeTimeoutHeader, provider.Echo(v), what)
	}
	// Also refuses NaN and infinities, which ParseFloat accepts.
	if !(secs > 0 && secs < 1e9) {
		return 0, fmt.Errorf("parse %s %s: must be a positive number of seconds", ScrapeTimeoutHeader, provider.Echo(v))
	}
	d := time.Duration(secs * float64(time.Second))
	// A value that rounds to nothing must not turn into "no header" (0)
	// or a budget no check can use; Prometheus's own minimum is 1ms.
	if d < MinScrapeTimeout {
		return 0, fmt.Errorf("parse %s %s: below the minimum of %s", ScrapeTimeoutHeader, provider.Echo(v), MinScrapeTimeout)
	}
	return d, nil
}

// MinScrapeTimeout is the smallest scrape timeout header accepted (see
// docs/configuration.md: "Timeouts"): a smaller value is answered with 400.
const MinScrapeTimeout = time.Millisecond

// Budget is the time one check of a scrape may take (docs/configuration.md: "Timeouts"): the provider's
// timeout, lowered to the scrape timeout minus the offset, so that the
// answer reaches Prometheus before it gives up. The offset never eats more
// than half of the scrape timeout, so the budget is never zero or negative.
// scrapeTimeout 0 means the scrape sent no header.
func Budget(providerTimeout, scrapeTimeout, offset time.Duration) time.Duration {
	if scrapeTimeout <= 0 {
		return providerTimeout
	}
	b := min(scrapeTimeout-offset, scrapeTimeout) // a negative offset cannot raise it
	if half := scrapeTimeout / 2; b < half {
		b = half
	}
	return max(min(providerTimeout, b), 1) // never zero, even for a 1ns header
}
