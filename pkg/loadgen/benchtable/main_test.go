package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kube5s/sless/pkg/loadgen"
)

func lines(t *testing.T, rs ...loadgen.Ratio) string {
	var b strings.Builder
	for _, r := range rs {
		r.Median = loadgen.Median(r.Rounds)
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(j, '\n'))
	}
	return b.String()
}

// all returns every expected figure, met.
func all() []loadgen.Ratio {
	var rs []loadgen.Ratio
	for _, n := range expected {
		rs = append(rs, loadgen.Ratio{Name: n, Unit: "x", Rounds: []float64{1, 1, 1}, Budget: 1})
	}
	return rs
}

func TestTableFailsOnMissedMissingOrErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func([]loadgen.Ratio) []loadgen.Ratio
		ok     bool
		want   string
	}{
		{"all met", func(r []loadgen.Ratio) []loadgen.Ratio { return r }, true, "ok"},
		{"below a lower bound", func(r []loadgen.Ratio) []loadgen.Ratio { r[0].Rounds = []float64{0.5, 2, 0.8}; return r }, false, "MISSED"},
		{"above an upper bound", func(r []loadgen.Ratio) []loadgen.Ratio {
			r[1].AtMost, r[1].Rounds = true, []float64{1.3, 0.9, 1.1}
			return r
		}, false, "MISSED"},
		{"errors", func(r []loadgen.Ratio) []loadgen.Ratio { r[2].Errors = 3; return r }, false, "FAILED (3 errors)"},
		{"missing", func(r []loadgen.Ratio) []loadgen.Ratio { return r[1:] }, false, "MISSING"},
		{"extra figure without budget", func(r []loadgen.Ratio) []loadgen.Ratio {
			return append(r, loadgen.Ratio{Name: "extra", Unit: "x", Rounds: []float64{0.1, 0.1, 0.1}})
		}, true, "(none)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			ok, err := table(strings.NewReader(lines(t, tc.change(all())...)), &out)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.ok || !strings.Contains(out.String(), tc.want) {
				t.Errorf("ok %v, want %v; table:\n%s", ok, tc.ok, out.String())
			}
		})
	}
}

func TestMedianOfRounds(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {nil, 0}} {
		if got := loadgen.Median(tc.in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
