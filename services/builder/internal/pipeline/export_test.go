package pipeline

import "github.com/prometheus/client_golang/prometheus/testutil"

// BuildsCounted is the count of builds by result and reason, for the tests.
func (m *Metrics) BuildsCounted(result, reason string) float64 {
	return testutil.ToFloat64(m.builds.WithLabelValues(result, reason))
}
