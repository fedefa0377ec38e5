package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// TestReasonCountsMostFrequentFirst: the status page lists the reasons of
// a state with the most frequent first, ties by name: in the fleet page's
// kvm row two hosts are down Unreachable and one HostKeyMismatch, so
// Unreachable comes first although it sorts after by name; the reason
// filter's choices are in the same order.
func TestReasonCountsMostFrequentFirst(t *testing.T) {
	t.Parallel()
	got := reasonCounts{"Alpha": 1, "Beta": 3, "Gamma": 3, "Delta": 2}.sorted()
	want := []reasonCount{{"Beta", 3}, {"Gamma", 3}, {"Delta", 2}, {"Alpha", 1}}
	if !slices.Equal(got, want) {
		t.Errorf("sorted %v, want %v", got, want)
	}

	_, srv, _ := newTestExporter(t, fleetPageConfig, fleetPageBehaviours(), 0)
	if code, _ := get(t, http.DefaultClient, srv.URL+"/?refresh=true", nil); code != http.StatusOK {
		t.Fatal(code)
	}
	_, page := get(t, http.DefaultClient, srv.URL+"/", nil)
	summary, _, _ := pageTables(t, page)
	kvmRow := summary["kvm"]
	if kvmRow == nil {
		t.Fatal("no kvm summary row")
	}
	var order []string
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && attr(n, "class") == "reason" {
			order = append(order, attr(n, "data-reason")+"="+attr(n, "data-count"))
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(findClass(kvmRow, "down-by"))
	if want := []string{string(provider.ReasonUnreachable) + "=2", "HostKeyMismatch=1"}; !slices.Equal(order, want) {
		t.Errorf("kvm's down reasons in the order %v, want %v", order, want)
	}
	doc, err := html.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	var options []string
	var walkSelect func(n *html.Node, in bool)
	walkSelect = func(n *html.Node, in bool) {
		if n.Type == html.ElementNode && n.Data == "select" {
			in = attr(n, "name") == "reason"
		}
		if in && n.Type == html.ElementNode && n.Data == "option" && attr(n, "value") != "" {
			options = append(options, attr(n, "value"))
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walkSelect(c, in)
		}
	}
	walkSelect(doc, false)
	// Ready 3 (nuc, r3, prod-cluster), Unreachable 2, then the ones of
	// one target by name.
	if len(options) < 3 || options[0] != string(provider.ReasonReady) || options[1] != string(provider.ReasonUnreachable) || !slices.IsSorted(options[2:]) {
		t.Errorf("reason filter's choices %v, want Ready, Unreachable, then by name", options)
	}
}
