#!/usr/bin/env bash
# make mixin-lint: vendors the mixin with jsonnet-bundler into an empty
# project, as a user would (`jb install`), and renders its alerts and
# dashboards from vendor/ with _config overrides: the selector must reach
# every alert and dashboard query, showMultiCluster must show the cluster
# variable and filter every dashboard query by it, and the severities must
# follow their settings.
#
# Usage: vendor-check.sh JB JSONNET (binaries built from tools/go.mod).
set -euo pipefail

jb="$(realpath "$1")"
jsonnet="$(realpath "$2")"
mixin="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../mixin" && pwd)"
proj="$(mktemp -d "${TMPDIR:-/tmp}/phe-jb.XXXXXX")"
trap 'rm -rf "$proj"' EXIT
cd "$proj"

fail() { echo "vendor-check: $*" >&2; exit 1; }

"$jb" init
# jb takes a local source as a path relative to the project.
"$jb" install "$(realpath --relative-to=. "$mixin")"
[[ -f vendor/mixin/mixin.libsonnet ]] || fail "jb install did not vendor mixin/mixin.libsonnet"

render() {
  "$jsonnet" -J vendor -e "
    local m = (import 'mixin/mixin.libsonnet') + { _config+:: $1 };
    { alerts: m.prometheusAlerts, dashboards: m.grafanaDashboards }"
}

out="$(render "{ providerHealthSelector: 'job=\"phe-vendored\"', criticalSeverity: 'page', warningSeverity: 'ticket' }")"
exprs="$(jq -r '.alerts.groups[].rules[].expr' <<<"$out")"
[[ -n "$exprs" ]] || fail "no alert expressions rendered"
grep -q 'job="provider-health"' <<<"$exprs" && fail "an alert ignores the providerHealthSelector override"
grep -q 'job="phe-vendored"' <<<"$exprs" || fail "the selector override reaches no alert"
sev="$(jq -r '[.alerts.groups[].rules[].labels.severity] | unique | join(",")' <<<"$out")"
[[ "$sev" == "page,ticket" ]] || fail "severities $sev, want page,ticket from criticalSeverity and warningSeverity"
jq -e '.dashboards[].templating.list[] | select(.name == "job") | .query.query | contains("job=\"phe-vendored\"")' <<<"$out" >/dev/null \
  || fail "the dashboard's job variable ignores the providerHealthSelector override"
jq -e '[.dashboards[].templating.list[] | select(.name == "cluster")] | length == 1 and .[0].hide == 2' <<<"$out" >/dev/null \
  || fail "the cluster variable is not hidden while showMultiCluster is off"

out="$(render "{ showMultiCluster: true }")"
jq -e '[.dashboards[].templating.list[] | select(.name == "cluster")] | .[0].hide == 0' <<<"$out" >/dev/null \
  || fail "the cluster variable is hidden although showMultiCluster is on"
# Rows have no query of their own.
missing="$(jq -r '.dashboards[].panels[] | (.targets // [])[].expr | select(contains("cluster=~\"$cluster\"") | not)' <<<"$out")"
[[ -z "$missing" ]] || fail "dashboard queries without the cluster filter under showMultiCluster: $missing"

# An alert that comes with its own runbook_url (here from a layer under the
# runbook links, as when alerts are composed with other mixins) keeps it.
keep="$("$jsonnet" -J vendor -e "
  local m = (import 'mixin/config.libsonnet') + (import 'mixin/alerts/alerts.libsonnet') + {
    prometheusAlerts+:: { groups: [g { rules: [r { annotations+: { runbook_url: 'https://runbooks.example/' + r.alert } } for r in super.rules] } for g in super.groups] },
  } + (import 'mixin/lib/add-runbook-links.libsonnet');
  std.set([r.annotations.runbook_url for g in m.prometheusAlerts.groups for r in g.rules])" | jq -r '.[]' | grep -vc '^https://runbooks.example/' || true)"
[[ "$keep" == 0 ]] || fail "the runbook links replaced $keep runbook_url annotations set by an override"
echo "vendor-check: jb install and render from vendor/ OK"
