package loadgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPU is the CPU time (user and system) spent by groups of processes,
// read from /proc: on two shared cores throughput is the inverse of the
// CPU a request costs everything on the machine, so each benchmark prints
// its per-request CPU per process beside its ratio (ARCHITECTURE.md 10).
type CPU map[string]time.Duration

// The groups SampleCPU reads.
const (
	CPUBroker   = "broker"       // RabbitMQ (beam.smp)
	CPUPostgres = "postgres"     // PostgreSQL: every backend, and those that exited (the postmaster's children)
	CPUSelf     = "test process" // the benchmark's own process: the service run in it, the baseline, the load generator, the function
)

// watched are the processes of a benchmark's own (a service or a baseline
// it runs apart from the load generator), by the group name they are read
// under.
var watched sync.Map // name -> pid

// Watch reads process pid's CPU under name in every sample until the
// returned function is called: a service or a baseline that a benchmark
// runs in a process of its own, so that its CPU per request is its own.
func Watch(name string, pid int) (forget func()) {
	watched.Store(name, pid)
	return func() { watched.Delete(name) }
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux).
const clockTick = 100

// SampleCPU reads the CPU time spent so far by the broker, PostgreSQL,
// this process and the watched ones. A group it cannot read is absent.
func SampleCPU() CPU {
	c := CPU{}
	self := os.Getpid()
	names := map[int]string{}
	watched.Range(func(k, v any) bool { names[v.(int)] = k.(string); return true })
	pids, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range pids {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		comm, f, ok := parseStat(raw)
		if !ok {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		own := ticks(f[11]) + ticks(f[12]) // utime, stime
		switch {
		case pid == self:
			c[CPUSelf] += own
		case names[pid] != "":
			c[names[pid]] += own
		case comm == "beam.smp":
			c[CPUBroker] += own
		case comm == "postgres" || comm == "postmaster":
			c[CPUPostgres] += own
			// The backends that exited were waited for by the postmaster
			// (cutime, cstime); counting them on every postgres process
			// is right, since only the postmaster has such children.
			c[CPUPostgres] += ticks(f[13]) + ticks(f[14])
		}
	}
	return c
}

// parseStat splits /proc/<pid>/stat after its command (which may hold
// spaces): f[0] is the state, f[11] utime.
func parseStat(raw []byte) (comm string, f []string, ok bool) {
	open, end := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
	if open < 0 || end < open {
		return "", nil, false
	}
	f = strings.Fields(string(raw[end+1:]))
	return string(raw[open+1 : end]), f, len(f) > 14
}

func ticks(s string) time.Duration {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.Duration(n) * time.Second / clockTick
}

// Sub is the CPU spent from before to c.
func (c CPU) Sub(before CPU) CPU {
	out := CPU{}
	for k, v := range c {
		out[k] = v - before[k]
	}
	return out
}

// Add sums two samples of spent CPU.
func (c CPU) Add(o CPU) CPU {
	out := CPU{}
	for k, v := range c {
		out[k] = v
	}
	for k, v := range o {
		out[k] += v
	}
	return out
}

// PerRequest prints the CPU per request of each group and their total,
// in microseconds: "broker 660, postgres 45, test process 250: 955 µs/req".
func (c CPU) PerRequest(requests int) string {
	if requests == 0 || len(c) == 0 {
		return "cpu n/a"
	}
	var parts []string
	var total time.Duration
	groups := []string{CPUBroker, CPUPostgres, CPUSelf}
	var own []string
	for k := range c {
		if !slices.Contains(groups, k) {
			own = append(own, k)
		}
	}
	slices.Sort(own)
	for _, k := range append(groups, own...) {
		if v, ok := c[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, float64(v.Microseconds())/float64(requests)))
			total += v
		}
	}
	return fmt.Sprintf("cpu µs/req: %s; total %.0f", strings.Join(parts, ", "), float64(total.Microseconds())/float64(requests))
}

// WithCPU wraps a side of a comparison: its Result carries the CPU the
// machine's broker, PostgreSQL and this process spent during it, and the
// heap allocations of this process.
func WithCPU(side func() Result) func() Result {
	return func() Result {
		before, allocs := SampleCPU(), mallocs()
		r := side()
		r.CPU = SampleCPU().Sub(before)
		r.Allocs = mallocs() - allocs
		return r
	}
}

// mallocs is the count of heap allocations this process made so far.
func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}
