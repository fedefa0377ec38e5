package collector

import (
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	t.Parallel()
	const s = time.Second
	for _, tc := range []struct {
		name                     string
		provider, scrape, offset time.Duration
		want                     time.Duration
	}{
		{"no header uses the provider timeout", 10 * s, 0, s / 2, 10 * s},
		{"header larger than the provider timeout", 5 * s, 30 * s, s / 2, 5 * s},
		{"header smaller than the provider timeout", 10 * s, 3 * s, s / 2, 2500 * time.Millisecond},
		{"offset larger than the header falls back to half", 10 * s, 1 * s, 2 * s, s / 2},
		{"offset leaving less than half falls back to half", 10 * s, 1 * s, 600 * time.Millisecond, s / 2},
		{"offset equal to the header", 10 * s, 2 * s, 2 * s, s},
		{"fractional header", 10 * s, 1500 * time.Millisecond, 250 * time.Millisecond, 1250 * time.Millisecond},
		{"zero offset", 10 * s, 4 * s, 0, 4 * s},
		{"provider timeout below half the header", 300 * time.Millisecond, 1 * s, 2 * s, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Budget(tc.provider, tc.scrape, tc.offset); got != tc.want {
				t.Errorf("Budget(%v, %v, %v) = %v, want %v", tc.provider, tc.scrape, tc.offset, got, tc.want)
			}
		})
	}
}

func TestParseScrapeTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"", 0, false},
		{"10", 10 * time.Second, false},
		{"1.5", 1500 * time.Millisecond, false},
		{"0.25", 250 * time.Millisecond, false},
		{"0", 0, true},
		{"-3", 0, true},
		{"NaN", 0, true},
		{"+Inf", 0, true},
		{"ten", 0, true},
	} {
		got, err := ParseScrapeTimeout(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseScrapeTimeout(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}
