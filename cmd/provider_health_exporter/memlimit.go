package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitEnv carries the container's memory limit in bytes, as the
// Kubernetes downward API gives it (resourceFieldRef limits.memory): the
// Deployment of deploy/kubernetes and the Helm chart set it. GOMEMLIMIT
// cannot be set that way: the downward API writes a plain number of bytes
// and cannot scale it, and a soft limit of the whole container limit leaves
// nothing for what is not Go heap (stacks, the binary, page cache of the
// files read) before the kernel kills the process.
const memoryLimitEnv = "PROVIDER_HEALTH_MEMORY_LIMIT"

// memoryLimitShare is the least part of the container limit left to what
// the Go runtime does not count (fileReserve); the rest is the runtime's
// soft limit: the garbage collector works harder as the heap nears it,
// well before the OOM killer would act.
const memoryLimitShare = 0.1

// fileReserve is the least left between the soft limit and the container's
// limit: the binary's own code and data, which the kernel maps from the
// file and counts in the container's memory but the Go runtime's limit
// does not. At 90% of a 256 MiB limit the runtime alone could fill 230 MiB
// and the process reached 283 MiB. 64 MiB held while the binary's
// resident pages were 45 MiB (a thousand Kubernetes entries checked,
// TestPagesStreamUnderTheDeploymentLimit); with kube-scheduler's plugins
// linked in (docs/configuration.md: "Scheduling: schedule") they reach 71 MiB, and
// TestLargeReloadsUnderTheDeploymentLimit peaked at 244 MiB of the 256
// with 64 MiB kept, 211 MiB with 96.
const fileReserve = 96 << 20

// softMemoryLimit is the soft memory limit for the Go runtime derived from
// the environment: memoryLimitEnv less the larger of fileReserve and
// memoryLimitShare of it, and never less than half of it; or 0 (leave the
// runtime alone) when GOMEMLIMIT is set, which the runtime has applied
// already and which wins, or when memoryLimitEnv is not set.
func softMemoryLimit(getenv func(string) string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	v := strings.TrimSpace(getenv(memoryLimitEnv))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit as a positive number of bytes (resourceFieldRef limits.memory with divisor 1)", memoryLimitEnv, v)
	}
	reserve := max(int64(float64(n)*memoryLimitShare), fileReserve)
	return max(n-reserve, n/2), nil
}

// applyMemoryLimit sets the Go runtime's soft memory limit from the
// environment (softMemoryLimit) and logs it.
func applyMemoryLimit(logger *slog.Logger) error {
	limit, err := softMemoryLimit(os.Getenv)
	if err != nil || limit == 0 {
		return err
	}
	debug.SetMemoryLimit(limit)
	logger.Info("Go memory limit set from the container's", "env", memoryLimitEnv, "bytes", limit)
	return nil
}
