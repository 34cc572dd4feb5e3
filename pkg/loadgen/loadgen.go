// Package loadgen drives HTTP load for the benchmarks that compare the
// platform with a bare baseline in one run: a fixed number of keep-alive
// connections, each sending requests back to back for a fixed time.
package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Result is what one load run measured.
type Result struct {
	Requests  int
	Errors    int
	Duration  time.Duration
	Latencies []time.Duration // sorted
	// CPU is what the broker, PostgreSQL and this process spent during
	// the run, when it was measured (WithCPU).
	CPU CPU
	// Allocs is the heap allocations this process made during the run,
	// when it was measured (WithCPU): steadier than CPU time on a loaded
	// machine.
	Allocs uint64
}

// Throughput is successful requests per second.
func (r Result) Throughput() float64 { return float64(r.Requests) / r.Duration.Seconds() }

// Percentile returns the latency at p (0..100).
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.Latencies)-1) * p / 100)
	return r.Latencies[i]
}

func (r Result) String() string {
	s := fmt.Sprintf("%8.0f req/s  p50 %6.0fµs  p99 %6.0fµs  errors %d",
		r.Throughput(), float64(r.Percentile(50).Microseconds()), float64(r.Percentile(99).Microseconds()), r.Errors)
	if r.CPU != nil {
		s += "  " + r.CPU.PerRequest(r.Requests)
	}
	if r.Allocs > 0 && r.Requests > 0 {
		s += fmt.Sprintf("  allocs/req %.0f", float64(r.Allocs)/float64(r.Requests))
	}
	return s
}

// Target makes one request; it returns an error for a failed request.
type Target func(ctx context.Context, c *http.Client) error

// Get returns a target that GETs url and expects 200.
func Get(url string) Target {
	return func(ctx context.Context, c *http.Client) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		return Do(c, req)
	}
}

// Do sends req, drains the body and fails on a status other than 2xx.
func Do(c *http.Client, req *http.Request) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// Run sends requests on conns connections for d.
func Run(ctx context.Context, target Target, conns int, d time.Duration) Result {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var res Result
	start := time.Now()
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			var lat []time.Duration
			ok, bad := 0, 0
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := target(ctx, c); err != nil {
					if ctx.Err() == nil {
						bad++
					}
					continue
				}
				lat = append(lat, time.Since(t0))
				ok++
			}
			mu.Lock()
			res.Requests += ok
			res.Errors += bad
			res.Latencies = append(res.Latencies, lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.Duration = time.Since(start)
	slices.Sort(res.Latencies)
	return res
}
