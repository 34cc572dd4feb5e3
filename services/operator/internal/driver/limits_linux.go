package driver

import (
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// limitMemory applies memoryMB as a best-effort address-space limit to a
// Python runtime (inherited by its workers), with 256 MiB of headroom for
// the interpreter. Node reserves far more address space than it uses, so
// its limit is the heap limit of the serving process, which the runtime sets
// from SLESS_MEMORY_MB.
func limitMemory(pid int, cmd []string, memoryMB int32) {
	if memoryMB <= 0 || len(cmd) == 0 || !strings.HasPrefix(filepath.Base(cmd[0]), "python") {
		return
	}
	limit := uint64(memoryMB+256) << 20
	_ = unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: limit, Max: limit}, nil)
}
