package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/client"
)

// TestFunctionRowsShowTheScaling: fn get shows the serving versions'
// ready and desired replicas summed, and each one's reason.
func TestFunctionRowsShowTheScaling(t *testing.T) {
	var f client.Function
	raw := `{"name":"app","runtime":"python3.11","created_at":"2026-12-06T10:00:00Z","status":{"phase":"Ready","ready":true,
		"serving":[{"version":1,"percent":0,"ready":true,"ready_replicas":1,"desired_replicas":1,"scaling_reason":"MinReplicas","draining":true},
		           {"version":2,"percent":100,"ready":true,"ready_replicas":2,"desired_replicas":3,"scaling_reason":"Load"}]}}`
	if err := json.Unmarshal([]byte(raw), &f); err != nil {
		t.Fatal(err)
	}
	rows := functionDetail(f, time.Date(2026, 12, 6, 10, 1, 0, 0, time.UTC))
	got := map[string]string{}
	for i, h := range rows.Header {
		got[h] = rows.Rows[0][i]
	}
	if got["REPLICAS"] != "3/4" || got["SCALING"] != "v1:MinReplicas,v2:Load" || got["NAME"] != "app" || got["AGE"] != "1m" {
		t.Errorf("REPLICAS %q, SCALING %q; want 3/4 and v1:MinReplicas,v2:Load (row %s)", got["REPLICAS"], got["SCALING"], strings.Join(rows.Rows[0], " | "))
	}
	// A function with nothing serving yet shows no counts.
	rows = functionDetail(client.Function{Name: "new"}, time.Now())
	if r := rows.Rows[0]; r[4] != "" || r[5] != "" {
		t.Errorf("a function serving nothing: %q", r)
	}
}
