#!/usr/bin/env bash
# kube-scheduler built once per machine by build-kube.sh (see there), at the
# apiserver's version: the oracle of the node-fit tests.
# Usage: build-scheduler.sh [--cached]  -> prints the path of the binary.
exec "$(dirname "$0")/build-kube.sh" kube-scheduler "$@"
