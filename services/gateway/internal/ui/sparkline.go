package ui

import (
	"fmt"
	"strings"
	"time"
)

// Buckets of the functions page's one-hour sparkline.
const (
	sparkBuckets = 12
	sparkWidth   = 120
	sparkHeight  = 24
)

// Spark is a sparkline of calls and failures: SVG polyline points and
// the text a screen reader reads instead.
type Spark struct {
	Calls, Failures        []int
	CallPoints, FailPoints string
	Label                  string
	Width, Height          int
}

// bucketOf is the bucket of an invocation started at t, counting back
// from now over the last hour; -1 outside it.
func bucketOf(now, t time.Time) int {
	age := now.Sub(t)
	if age < 0 || age >= time.Hour {
		return -1
	}
	return sparkBuckets - 1 - int(age/(time.Hour/sparkBuckets))
}

// NewSpark draws calls and failures per bucket, oldest first, scaled to
// the larger count; partial says the counts are a lower bound.
func NewSpark(calls, failures []int, partial bool) Spark {
	peak := 1
	tc, tf := 0, 0
	for i := range calls {
		peak = max(peak, calls[i], failures[i])
		tc += calls[i]
		tf += failures[i]
	}
	pts := func(v []int) string {
		var b strings.Builder
		for i, n := range v {
			x := float64(i) * sparkWidth / float64(len(v)-1)
			y := sparkHeight - 1 - float64(n)*(sparkHeight-2)/float64(peak)
			fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
		}
		return strings.TrimSpace(b.String())
	}
	atLeast := ""
	if partial {
		atLeast = "at least "
	}
	return Spark{Calls: calls, Failures: failures, CallPoints: pts(calls), FailPoints: pts(failures), Width: sparkWidth, Height: sparkHeight,
		Label: fmt.Sprintf("Last hour: %s%d calls, %d failed", atLeast, tc, tf)}
}
