#!/bin/sh
# table.sh prints a summary table of BenchmarkFleet from `go test -bench`
# output (a file, or stdin), averaging repeated runs (-count). Called by
# `make bench`; the columns are explained in docs/scaling.md: "Performance".
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
	printf "%-40s %4s %9s %8s %7s %7s %8s %6s %9s %8s %6s %7s %9s %7s %7s %5s %9s %9s %9s %8s %7s %7s %7s %6s\n", \
		"fleet", "runs", "steady-ms", "median", "cold-s", "warmups", "dials/sc", "rpcs/h", "heapKiB/h", "rssKiB/h", "gor/h", \
		"cpu-ms", "cachedcpu", "KB/scr", "slowest", "late", "notready1", "notready2", "notready3", "notready", "rssMiB", "warmcpu", "xsess", "drops"
	for (k = 1; k <= n; k++) {
		m = order[k]
		rssmib = "-"
		if ((m, "rss-MiB") in sum) rssmib = sprintf("%.0f", avg(m, "rss-MiB"))
		printf "%-40s %4d %9.1f %8.1f %7.2f %7.1f %8.2f %6.2f %9.1f %8.1f %6.1f %7.1f %9.1f %7.0f %7.2f %5.1f %9.0f %9.0f %9.0f %8.1f %7s %7.1f %7.1f %6.1f\n", m, runs[m], \
			avg(m, "ns/op") / 1e6, avg(m, "median-ms"), avg(m, "cold-s"), avg(m, "warmup-scrapes"), avg(m, "dials/scrape"), \
			avg(m, "rpcs/host/scrape"), avg(m, "heap-B/host") / 1024, avg(m, "rss-B/host") / 1024, avg(m, "goroutines/host"), \
			avg(m, "cpu-ms/scrape"), avg(m, "cached-cpu-ms/scrape"), avg(m, "bytes/scrape") / 1000, \
			avg(m, "slowest-s"), avg(m, "late-answers"), avg(m, "notready-scrape1"), avg(m, "notready-scrape2"), avg(m, "notready-scrape3"), \
			avg(m, "notready/scrape"), rssmib, avg(m, "warmup-cpu-s"), avg(m, "extra-sessions"), avg(m, "drops-logged")
	}
	print ""
	print "steady-ms / median: mean / median wall of a steady scrape (engine + text encoding); cold-s: the first scrape;"
	print "rpcs/h: libvirt calls per host per steady scrape (1; 2 with min_free_memory; 3 with volume and network);"
	print "cpu-ms / cachedcpu: exporter CPU, in ms, per steady / fully cached (min_interval 1h) scrape;"
	print "slowest: the longest answer of any scrape, in s; late: answers after budget + 100 ms;"
	print "notready1 / 2 / 3: healthy hosts not Ready at the first / second / third scrape (one header apart);"
	print "notready: healthy hosts not Ready per steady scrape; rssMiB: resident memory after 50 steady scrapes;"
	print "warmcpu: exporter CPU (s) of the warm-up scrapes; xsess: sessions of healthy hosts beyond one per host;"
	print "drops: kept connections dropped and logged (at info)."
}' "${1:--}"
