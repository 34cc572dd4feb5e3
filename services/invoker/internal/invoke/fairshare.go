package invoke

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// TenantSlots caps the calls one tenant has in flight on this replica, so
// that one tenant's slow calls cannot hold every slot of the shared
// invocation queue while other tenants' calls wait behind them. A call over
// its tenant's cap goes back to the broker (rabbit.Defer) and frees its
// slot for the next message, which is likely another tenant's.
type TenantSlots struct {
	// Tenants reads Tenant objects (the watch cache) for their quota.
	Tenants client.Reader
	// Slots is the replica's calls in flight (its prefetch).
	Slots int

	mu       sync.Mutex
	inFlight map[string]int
}

// TenantCap is the number of calls a tenant may have in flight on a replica
// with slots: its quota when set, else a quarter of the slots (at least
// one), so that at least four tenants are served at once by default. A
// quota above the slots is the slots.
func TenantCap(quota int32, slots int) int {
	if quota > 0 {
		return min(int(quota), max(slots, 1))
	}
	return max(slots/4, 1)
}

// Acquire takes a slot of tenant's cap; ok is false when the tenant is at
// its cap. release must be called once the call ended.
func (s *TenantSlots) Acquire(ctx context.Context, tenant string) (release func(), ok bool) {
	var quota int32
	var t slessv1.Tenant
	if s.Tenants != nil && s.Tenants.Get(ctx, client.ObjectKey{Name: tenant}, &t) == nil {
		quota = t.Spec.Quotas.MaxConcurrentInvocations
	}
	limit := TenantCap(quota, s.Slots)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight == nil {
		s.inFlight = map[string]int{}
	}
	if s.inFlight[tenant] >= limit {
		return nil, false
	}
	s.inFlight[tenant]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inFlight[tenant]--; s.inFlight[tenant] <= 0 {
			delete(s.inFlight, tenant)
		}
	}, true
}
