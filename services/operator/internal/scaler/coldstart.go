package scaler

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kube5s/sless/pkg/loadreport"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
)

// coldStarts are the wakes the scaler saw end (from its decision to wake
// a version at zero to the reconcile that found a replica ready), per
// version and per function: what cron.preWarmSeconds "auto" leads by. They
// live in memory: an operator that starts again (or a new leader) leads by
// autoscale.DefaultPreWarmLead until it has seen wakes of its own.
type coldStarts struct {
	versions  map[loadreport.Key]*autoscale.ColdStarts
	functions map[types.NamespacedName]*autoscale.ColdStarts
}

func (c *coldStarts) observe(k loadreport.Key, d time.Duration) {
	if c.versions == nil {
		c.versions, c.functions = map[loadreport.Key]*autoscale.ColdStarts{}, map[types.NamespacedName]*autoscale.ColdStarts{}
	}
	fn := types.NamespacedName{Namespace: k.Namespace, Name: k.Function}
	if c.versions[k] == nil {
		c.versions[k] = &autoscale.ColdStarts{}
	}
	if c.functions[fn] == nil {
		c.functions[fn] = &autoscale.ColdStarts{}
	}
	c.versions[k].Observe(d)
	c.functions[fn].Observe(d)
}

// ColdStartP95 is the p95 cold start that a pre-warm of versions of
// namespace/function leads by: the longest p95 among those versions that
// have one, else the function's over all its versions (a new version
// starts like the ones before it), else 0 (none observed).
func (s *Scaler) ColdStartP95(namespace, function string, versions []int32) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var p95 time.Duration
	for _, n := range versions {
		p95 = max(p95, s.cold.versions[loadreport.Key{Namespace: namespace, Function: function, Version: n}].P95())
	}
	if p95 > 0 {
		return p95
	}
	return s.cold.functions[types.NamespacedName{Namespace: namespace, Name: function}].P95()
}

func (c *coldStarts) forget(namespace, function string) {
	for k := range c.versions {
		if k.Namespace == namespace && k.Function == function {
			delete(c.versions, k)
		}
	}
	delete(c.functions, types.NamespacedName{Namespace: namespace, Name: function})
}
