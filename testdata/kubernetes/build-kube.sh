#!/usr/bin/env bash
# Builds a command of the k8s.io/kubernetes module (kube-apiserver,
# kube-scheduler) into a cache outside the repository, so that only the first
# run on a machine pays the 10-20 minute build; the second command of the same
# module reuses the first one's build cache and takes a few minutes.
# k8s.io/kubernetes replaces its staging modules with local paths that do not
# exist in the module zip; we pin each of them to the matching v0.x tag.
#
# Usage: build-kube.sh COMMAND  -> prints the path of the binary on stdout.
#        build-kube.sh COMMAND --cached  -> prints it only if it is built
#        already (exit 1 otherwise): whether a build would run, without running it.
# build-apiserver.sh and build-scheduler.sh name the command.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
CACHE="${PHE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider_health_exporter}"
CMD="${1:?usage: build-kube.sh kube-apiserver|kube-scheduler [--cached]}"
shift
case "$CMD" in
  kube-apiserver | kube-scheduler) ;;
  *) echo "build-kube: unknown command $CMD" >&2; exit 2 ;;
esac
# The binary carries its version, as a release's does (Kubernetes'
# hack/lib/version.sh sets these): /version says gitVersion v1.37.2, not
# v0.0.0-master+$Format:%H$, which a chart's kubeVersion constraint refuses
# (helm install of deploy/helm). "-stamped" in the name: a cache of a build
# without the stamp is not taken; relinking it reuses Go's build cache.
OUT="$CACHE/$CMD-$K8S_VERSION-stamped"

if [[ -x "$OUT" ]]; then
  echo "$OUT"
  exit 0
fi
[[ "${1:-}" != --cached ]] || exit 1

GO="${GO:-go}"
# One work module for every command: the second build reuses the first's
# downloads and compiled packages.
work="$CACHE/build-kube-apiserver-$K8S_VERSION"
mkdir -p "$work"
cd "$work"

gomod="$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
if [[ -z "$gomod" || ! -f "$gomod" ]]; then
  echo "build-apiserver: cannot download k8s.io/kubernetes@$K8S_VERSION go.mod" >&2
  exit 1
fi

{
  echo "module phe/kube-apiserver-build"
  echo
  echo "go 1.25"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  # Every "k8s.io/x => ./staging/src/k8s.io/x" becomes "k8s.io/x => k8s.io/x vX".
  sed -n 's#^[[:space:]]*\(k8s.io/[^[:space:]]*\) => ./staging/src/.*#replace \1 => \1 '"$STAGING_VERSION"'#p' "$gomod"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO

echo "build-kube: building $CMD $K8S_VERSION (first run only, 10-20 min)" >&2
GOFLAGS=-mod=mod "$GO" mod tidy >&2 2>/dev/null || true
GOFLAGS=-mod=mod "$GO" get "k8s.io/kubernetes/cmd/$CMD@$K8S_VERSION" >&2
major="${K8S_VERSION#v}"
minor="${major#*.}"
major="${major%%.*}"
minor="${minor%%.*}"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean"
done
# A temporary name of this build's own: two builds at once (two checkouts'
# tests) do not write one file.
CGO_ENABLED=0 GOFLAGS=-mod=mod "$GO" build -trimpath -ldflags "$ldflags" -o "$OUT.tmp.$$" "k8s.io/kubernetes/cmd/$CMD" >&2
mv "$OUT.tmp.$$" "$OUT"
echo "$OUT"
