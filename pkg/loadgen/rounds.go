package loadgen

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ABBA measures each side twice, in order and then in reverse order (A B B
// A, or A B C C B A), starting with the last side on odd rounds, so that a
// shared machine's drift hits every side alike. It returns each side's two
// runs merged, in the order of sides.
func ABBA(round int, sides ...func() Result) []Result {
	n := len(sides)
	order := make([]int, 0, 2*n)
	for i := range n {
		order = append(order, i)
	}
	if round%2 == 1 {
		slices.Reverse(order)
	}
	for i := n - 1; i >= 0; i-- {
		order = append(order, order[i])
	}
	out := make([]Result, n)
	seen := make([]bool, n)
	for _, i := range order {
		r := sides[i]()
		if seen[i] {
			r = Merge(out[i], r)
		}
		out[i], seen[i] = r, true
	}
	return out
}

// Merge adds two runs of one side together.
func Merge(x, y Result) Result {
	lat := append(append([]time.Duration(nil), x.Latencies...), y.Latencies...)
	slices.Sort(lat)
	var cpu CPU
	if x.CPU != nil || y.CPU != nil {
		cpu = x.CPU.Add(y.CPU)
	}
	return Result{Requests: x.Requests + y.Requests, Errors: x.Errors + y.Errors, Duration: x.Duration + y.Duration, Latencies: lat, CPU: cpu,
		Allocs: x.Allocs + y.Allocs}
}

// Median is the median of v (0 for none).
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Rounds is the number of rounds a benchmark runs: $SLESS_BENCH_ROUNDS, or
// def; never fewer than 3, since one round on a shared machine says little.
func Rounds(def int) int {
	if n, err := strconv.Atoi(os.Getenv("SLESS_BENCH_ROUNDS")); err == nil && n > 0 {
		def = n
	}
	return max(def, 3)
}

// Ratio is one figure of `make bench`: a ratio (or a cost in percent)
// measured in several rounds, against its budget (ARCHITECTURE.md §10).
type Ratio struct {
	// Name is the row of the table, e.g. "queue trigger / bare loop".
	Name string `json:"name"`
	// Unit is "x" for a ratio, "%" for a cost.
	Unit   string    `json:"unit"`
	Rounds []float64 `json:"rounds"`
	Median float64   `json:"median"`
	// Budget is the bound the median must keep; 0 means none (reported
	// for information). AtMost makes it an upper bound.
	Budget float64 `json:"budget,omitempty"`
	AtMost bool    `json:"at_most,omitempty"`
	// Load is the machine's 1-minute load average when the figure was taken.
	Load float64 `json:"load"`
	// Errors counts failed requests over every round of both sides.
	Errors int `json:"errors"`
}

// Met says whether the median keeps the budget.
func (r Ratio) Met() bool {
	switch {
	case r.Budget == 0:
		return true
	case r.AtMost:
		return r.Median <= r.Budget
	default:
		return r.Median >= r.Budget
	}
}

// BudgetText is the budget as written in the table ("≥ 0.90x").
func (r Ratio) BudgetText() string {
	if r.Budget == 0 {
		return "(none)"
	}
	op := ">="
	if r.AtMost {
		op = "<="
	}
	return fmt.Sprintf("%s %.2f%s", op, r.Budget, r.Unit)
}

// Record computes the median of r.Rounds, prints the figure, and appends
// it as a JSON line to the file named by $SLESS_BENCH_RESULTS (set by
// make bench, which prints every figure in one table at the end).
func Record(r Ratio) (Ratio, error) {
	r.Median = Median(r.Rounds)
	r.Load = LoadAverage()
	rounds := make([]string, len(r.Rounds))
	for i, v := range r.Rounds {
		rounds[i] = fmt.Sprintf("%.2f", v)
	}
	verdict := "met"
	if !r.Met() {
		verdict = "MISSED"
	}
	if r.Budget == 0 {
		verdict = "no budget"
	}
	fmt.Printf("%-44s median %.2f%s of rounds [%s], budget %s: %s (load %.1f)\n",
		r.Name, r.Median, r.Unit, strings.Join(rounds, " "), r.BudgetText(), verdict, r.Load)
	path := os.Getenv("SLESS_BENCH_RESULTS")
	if path == "" {
		return r, nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return r, err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return r, fmt.Errorf("bench results: %w", err)
	}
	defer f.Close()
	_, err = f.Write(append(line, '\n'))
	return r, err
}

// LoadAverage is the 1-minute load average (/proc/loadavg), 0 where there
// is none.
func LoadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
