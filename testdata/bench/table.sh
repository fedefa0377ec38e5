#!/bin/sh
# table.sh prints a summary table of BenchmarkFleet from `go test -bench`
# output (a file, or stdin), averaging repeated runs (-count). Called by
# `make bench`; the columns are explained in the README ("Performance").
set -eu
awk '
$1 ~ /^BenchmarkFleet\// {
	name = $1
	sub(/^BenchmarkFleet\//, "", name)
	sub(/-[0-9]+$/, "", name)  # the GOMAXPROCS suffix
	if (!(name in runs)) order[++n] = name
	runs[name]++
	sum[name, "ns/op"] += $3
	for (i = 5; i < NF; i += 2) sum[name, $(i + 1)] += $i
}
function avg(name, unit) { return sum[name, unit] / runs[name] }
END {
	if (n == 0) { print "table.sh: no BenchmarkFleet results in the input" > "/dev/stderr"; exit 1 }
	printf "%-22s %4s %9s %8s %8s %8s %10s %6s %7s %9s %9s %9s\n", \
		"fleet", "runs", "steady-ms", "cold-s", "warmups", "dials/sc", "heapKiB/h", "gor/h", "cpu-ms", "notready1", "notready2", "notready"
	for (k = 1; k <= n; k++) {
		m = order[k]
		nr1 = ((m, "notready-scrape1") in sum) ? sprintf("%9.0f", avg(m, "notready-scrape1")) : sprintf("%9s", "-")
		nr2 = ((m, "notready-scrape2") in sum) ? sprintf("%9.0f", avg(m, "notready-scrape2")) : sprintf("%9s", "-")
		printf "%-22s %4d %9.1f %8.2f %8.1f %8.2f %10.1f %6.1f %7.1f %s %s %9.1f\n", m, runs[m], \
			avg(m, "ns/op") / 1e6, avg(m, "cold-s"), avg(m, "warmup-scrapes"), avg(m, "dials/scrape"), \
			avg(m, "heap-B/host") / 1024, avg(m, "goroutines/host"), avg(m, "cpu-ms/scrape"), nr1, nr2, \
			avg(m, "notready/scrape")
	}
}' "${1:--}"
