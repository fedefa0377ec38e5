package engine

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
		{"1_0", 0, true}, // Go literal syntax ParseFloat takes; no Prometheus sends it
		{"0x1_0p0", 0, true},
	} {
		got, err := ParseScrapeTimeout(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseScrapeTimeout(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestParseScrapeTimeoutTiny(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"1e-9", "1e-10", "0x1p-40", "0.0009999", "5e-324"} {
		if got, err := ParseScrapeTimeout(in); err == nil {
			t.Errorf("ParseScrapeTimeout(%q) = %v, want an error (below 1ms)", in, got)
		}
	}
	if got, err := ParseScrapeTimeout("0.001"); err != nil || got != time.Millisecond {
		t.Errorf("ParseScrapeTimeout(0.001) = %v, %v; want 1ms", got, err)
	}
}

// FuzzScrapeTimeout: whatever the header says, it is refused or gives a
// budget above zero and never above the header.
func FuzzScrapeTimeout(f *testing.F) {
	for _, s := range []string{"", "10", "1.5", "0.001", "1e-9", "1e-10", "0x1p-40", "0x1p+10", "1e9", "999999999.9",
		"1_000", "+1", "-0", "0e0", ".5", "5.", "NaN", "inf", "1e308", "0.0005", " 1", "1\x00"} {
		f.Add(s, int64(10*time.Second), int64(500*time.Millisecond))
	}
	f.Fuzz(func(t *testing.T, v string, provider, offset int64) {
		st, err := ParseScrapeTimeout(v)
		if err != nil {
			return
		}
		if v == "" {
			if st != 0 {
				t.Fatalf("no header gave %v", st)
			}
			return
		}
		if st < MinScrapeTimeout {
			t.Fatalf("ParseScrapeTimeout(%q) = %v, below the minimum", v, st)
		}
		p := time.Duration(provider)
		if p <= 0 {
			p = time.Second // config refuses a timeout that is not positive
		}
		b := Budget(p, st, time.Duration(offset))
		if b <= 0 || b > st || b > p {
			t.Fatalf("Budget(%v, %v, %v) = %v: want within (0, min(provider, header)]", p, st, time.Duration(offset), b)
		}
	})
}
