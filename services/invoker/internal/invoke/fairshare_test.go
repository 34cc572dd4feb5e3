package invoke

import (
	"context"
	"testing"
)

func TestTenantCap(t *testing.T) {
	for _, c := range []struct {
		name  string
		quota int32
		slots int
		want  int
	}{
		{"default is a quarter of the slots", 0, 64, 16},
		{"default is at least one", 0, 3, 1},
		{"quota", 5, 64, 5},
		{"quota above the slots is the slots", 500, 64, 64},
		{"no slots configured", 0, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := TenantCap(c.quota, c.slots); got != c.want {
				t.Errorf("TenantCap(%d, %d) = %d, want %d", c.quota, c.slots, got, c.want)
			}
		})
	}
}

// TestTenantSlotsCapOneTenantOnly: a tenant at its cap is refused while
// another tenant still gets a slot, and a released slot is free again.
func TestTenantSlotsCapOneTenantOnly(t *testing.T) {
	s := &TenantSlots{Slots: 8} // no Tenants reader: the default cap, 2
	ctx := context.Background()
	var releases []func()
	for range 2 {
		r, ok := s.Acquire(ctx, "busy")
		if !ok {
			t.Fatal("busy was refused below its cap")
		}
		releases = append(releases, r)
	}
	if _, ok := s.Acquire(ctx, "busy"); ok {
		t.Fatal("busy got a third slot over its cap of 2")
	}
	other, ok := s.Acquire(ctx, "quiet")
	if !ok {
		t.Fatal("quiet was refused while busy held its cap")
	}
	other()
	releases[0]()
	if _, ok := s.Acquire(ctx, "busy"); !ok {
		t.Fatal("busy was refused after one of its calls ended")
	}
}
