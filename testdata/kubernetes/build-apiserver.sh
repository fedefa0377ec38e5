#!/usr/bin/env bash
# kube-apiserver built once per machine by build-kube.sh (see there).
# Usage: build-apiserver.sh [--cached]  -> prints the path of the binary.
exec "$(dirname "$0")/build-kube.sh" kube-apiserver "$@"
