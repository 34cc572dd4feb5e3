// Command benchtable prints the figures the benchmarks recorded
// (loadgen.Record, one JSON line each) as one table against their budgets
// and exits non-zero when a budget is missed, a round had errors, or a
// figure that make bench must produce is missing. make bench runs it last.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/kube5s/sless/pkg/loadgen"
)

// expected are the figures of ARCHITECTURE.md §10, in the order printed;
// figures without a budget (for information) may follow them.
var expected = []string{
	"sync invoke: gateway / bare proxy, throughput",
	"sync invoke: gateway / bare proxy, p50 latency",
	"sync invoke: gateway / bare proxy, CPU per call",
	"async accept: gateway 202 / bare HTTP publisher",
	"history: recording cost",
	"queue trigger: trigger / bare loop with the record",
	"runtime python: wrapper / bare server",
	"runtime node: wrapper / bare server",
	"cold start python: driver / bare spawn",
	"cold start node: driver / bare spawn",
	"wake from zero p50: platform / bare spawn",
	"wake from zero p99: platform / bare spawn",
	"rollback, target warm: rollback to first 200 of it, p50",
	"rollback, target warm: rollback to first 200 of it, max",
	"rollback to a version at zero p50: rollback to first 200 / bare spawn",
	"rollback to a version at zero p99: rollback to first 200 / bare spawn",
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: benchtable RESULTS.jsonl")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	ok, err := table(f, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// table reads the recorded figures and writes the table; ok is false when
// a budget is missed, a figure had errors, or an expected one is missing.
func table(r io.Reader, w io.Writer) (ok bool, err error) {
	got := map[string]loadgen.Ratio{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var x loadgen.Ratio
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return false, fmt.Errorf("bench results: %w", err)
		}
		if _, dup := got[x.Name]; !dup {
			order = append(order, x.Name)
		}
		got[x.Name] = x
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	rows := append([]string(nil), expected...)
	for _, n := range order {
		if !contains(expected, n) {
			rows = append(rows, n)
		}
	}
	ok = true
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tmedian\tbudget\tresult\trounds\tload")
	for _, n := range rows {
		x, found := got[n]
		if !found {
			ok = false
			fmt.Fprintf(tw, "%s\t-\t\tMISSING (the benchmark failed or did not run)\t\t\n", n)
			continue
		}
		verdict := "ok"
		switch {
		case x.Errors > 0:
			verdict, ok = fmt.Sprintf("FAILED (%d errors)", x.Errors), false
		case !x.Met():
			verdict, ok = "MISSED", false
		case x.Budget == 0:
			verdict = "-"
		}
		rounds := make([]string, len(x.Rounds))
		for i, v := range x.Rounds {
			rounds[i] = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(tw, "%s\t%.2f%s\t%s\t%s\t%s\t%.1f\n", n, x.Median, x.Unit, x.BudgetText(), verdict, strings.Join(rounds, " "), x.Load)
	}
	if err := tw.Flush(); err != nil {
		return false, err
	}
	return ok, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
