//go:build browser

package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestStatusPageDomainsInBrowser: the failure domains of a target, as many
// as an entry may have (64) with names as long as a label value may be,
// stay within the message column in a 1366px window: a Ready row's in one
// line cut with an ellipsis, its start the domain whose loss hurts most; a
// row that needs someone's wrapped within the cell (docs/metrics.md:
// "Capacity per failure domain").
func TestStatusPageDomainsInBrowser(t *testing.T) {
	artifacts := t.ArtifactDir()
	var ds []provider.Domain
	for i := range provider.MaxDomains {
		name := fmt.Sprintf("zone-%02d", i)
		if i%16 == 3 {
			name = fmt.Sprintf("%s%02d", strings.Repeat("x", provider.MaxLabelValue-2), i) // no word to break at
		}
		ds = append(ds, provider.Domain{Name: name, Capacity: int64(i) * 1000, Proxies: int64(i), AfterLoss: 5 - int64(i), HasAfterLoss: i%2 == 0})
	}
	_, srv, _ := newTestExporter(t, baseConfig, map[string]func(context.Context, *slog.Logger, string) provider.Verdict{
		"lab": func(_ context.Context, _ *slog.Logger, target string) provider.Verdict {
			if target == "nuc" {
				return provider.Verdict{Reason: provider.ReasonReady, Message: "fits", Capacity: provider.Capacity{Known: true, Proxies: 55, Binding: "nodes"}, Domains: ds}
			}
			return provider.Verdict{Reason: provider.ReasonUnreachable, Message: "no route to host", Domains: ds}
		},
	}, 0)
	if code, body := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatalf("refresh: %d %s", code, body)
	}
	ctx := startChromium(t, artifacts)
	console := watchConsole(ctx)
	page := &statusPage{t: t, ctx: ctx, base: srv.URL}
	page.open(srv.URL + "/")
	page.screenshot(filepath.Join(artifacts, "status-page-domains.png"))
	console.assertNoErrors(t, "domains page", false)

	type box struct {
		Found       bool    `json:"found"`
		First       string  `json:"first"`
		Height      float64 `json:"height"`
		Line        float64 `json:"line"`
		ScrollWidth float64 `json:"scrollWidth"`
		Width       float64 `json:"width"`
		CellRight   float64 `json:"cellRight"`
		ColumnRight float64 `json:"columnRight"`
	}
	measure := func(target string) box {
		return browserValue(page, "measuring the domains of "+target, chromedp.Evaluate[box](`(() => {
			const tr = document.querySelector('#targets tr[data-target="`+target+`"]');
			const d = tr && tr.querySelector('td.message div.domains');
			if (!d) { return {found: false}; }
			const cell = d.closest('td').getBoundingClientRect();
						return {found: true, first: d.querySelector('span').textContent,
				height: d.getBoundingClientRect().height, line: parseFloat(getComputedStyle(d).lineHeight) || 1.3 * parseFloat(getComputedStyle(d).fontSize),
				scrollWidth: d.scrollWidth, width: d.clientWidth,
				cellRight: d.getBoundingClientRect().right, columnRight: cell.right};
		})()`))
	}
	ready, down := measure("nuc"), measure("beelink")
	for name, b := range map[string]box{"ready": ready, "down": down} {
		if !b.Found {
			t.Fatalf("%s row: no domains line", name)
		}
		if b.First != "zone-62: 62,000 fit, 62 proxies, after loss \u221257" {
			t.Errorf("%s row: first domain %q, want the worst loss first", name, b.First)
		}
		if b.CellRight > b.ColumnRight+0.5 {
			t.Errorf("%s row: the domains end at %.1fpx, past their cell's %.1fpx", name, b.CellRight, b.ColumnRight)
		}
	}
	if ready.Height > 1.5*ready.Line || ready.ScrollWidth <= ready.Width {
		t.Errorf("ready row: domains %.1fpx high (a line is %.1fpx), %.0f of %.0fpx wide: want one line, cut", ready.Height, ready.Line, ready.ScrollWidth, ready.Width)
	}
	if down.ScrollWidth > down.Width || down.Height < 3*down.Line {
		t.Errorf("down row: domains %.0f of %.0fpx wide, %.1fpx high: want them wrapped within the cell", down.ScrollWidth, down.Width, down.Height)
	}
	if w := browserValue(page, "the page's width", chromedp.Evaluate[float64](`document.documentElement.scrollWidth - document.documentElement.clientWidth`)); w > 0 {
		t.Errorf("the page is %.0fpx wider than the window", w)
	}
}
