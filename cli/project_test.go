package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube5s/sless/pkg/client"
)

// TestScalingSchedulesFromSlessYAML: sless.yaml's scaling_schedules are
// what a deploy sends; left out, the function keeps the ones it has (as
// every setting sless.yaml does not mention); a misspelt key is an error.
func TestScalingSchedulesFromSlessYAML(t *testing.T) {
	write := writeProjectFile
	const head = "name: office\nruntime: python3.11\nentrypoint: main.handler\n"
	berlin := "Europe/Berlin"
	cur := &client.Function{Runtime: "python3.11", Entrypoint: "main.handler",
		ScalingSchedules: &[]client.ScalingSchedule{{Cron: "0 8 * * *", DurationSeconds: 60, MinReplicas: 1}}}

	p, err := loadProject(write(t, head+"scaling_schedules:\n- {cron: \"0 9 * * 1-5\", time_zone: Europe/Berlin, duration_seconds: 32400, min_replicas: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := &[]client.ScalingSchedule{{Cron: "0 9 * * 1-5", TimeZone: &berlin, DurationSeconds: 32400, MinReplicas: 2}}
	if diff := cmp.Diff(want, desiredSpec(cur, p).ScalingSchedules); diff != "" {
		t.Errorf("the file's schedules (-want +got):\n%s", diff)
	}

	p, err = loadProject(write(t, head))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cur.ScalingSchedules, desiredSpec(cur, p).ScalingSchedules); diff != "" {
		t.Errorf("left out of the file (-want the function's +got):\n%s", diff)
	}

	if _, err := loadProject(write(t, head+"scaling_schedules:\n- {cron: \"@daily\", duration: 60, min_replicas: 2}\n")); err == nil {
		t.Error("a misspelt key of a schedule was accepted")
	}
}

// writeProjectFile writes body as sless.yaml in a new directory and
// returns the directory.
func writeProjectFile(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, projectFile), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestScalingSettingsFromSlessYAML: each scaling setting of sless.yaml
// (min_replicas 0 included) is what a deploy sends, under the API's name,
// in the body of a create and of a replace; one the file leaves out keeps
// the function's value; a misspelt key is an error.
func TestScalingSettingsFromSlessYAML(t *testing.T) {
	const head = "name: tuned\nruntime: python3.11\nentrypoint: main.handler\nconcurrency: 8\n"
	fields := []string{"min_replicas", "max_replicas", "target_concurrency", "scale_down_delay_seconds", "max_buffered_requests"}
	// sent is what a body carries of the scaling settings, as the API
	// reads it (absent: nil).
	sent := func(t *testing.T, body any) map[string]any {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		out := map[string]any{}
		for _, k := range fields {
			out[k] = m[k]
		}
		return out
	}
	cur := &client.Function{Runtime: "python3.11", Entrypoint: "main.handler", MinReplicas: ptr[int32](2), MaxReplicas: ptr[int32](9),
		TargetConcurrency: ptr[int32](7), ScaleDownDelaySeconds: ptr[int32](600), MaxBufferedRequests: ptr[int32](5000)}

	p, err := loadProject(writeProjectFile(t, head+"min_replicas: 0\nmax_replicas: 5\ntarget_concurrency: 6\nscale_down_delay_seconds: 45\nmax_buffered_requests: 250\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"min_replicas": 0.0, "max_replicas": 5.0, "target_concurrency": 6.0, "scale_down_delay_seconds": 45.0, "max_buffered_requests": 250.0}
	var create client.FunctionInput
	if err := convert(desiredSpec(nil, p), &create); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, sent(t, create)); diff != "" {
		t.Errorf("the create's body (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, sent(t, desiredSpec(cur, p))); diff != "" {
		t.Errorf("the replace's body (-want +got):\n%s", diff)
	}
	if sameSpec(specOf(cur), desiredSpec(cur, p)) {
		t.Error("settings that differ from the function's count as unchanged")
	}

	p, err = loadProject(writeProjectFile(t, head+"target_concurrency: 3\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]any{"min_replicas": 2.0, "max_replicas": 9.0, "target_concurrency": 3.0, "scale_down_delay_seconds": 600.0, "max_buffered_requests": 5000.0}
	if diff := cmp.Diff(want, sent(t, desiredSpec(cur, p))); diff != "" {
		t.Errorf("the function's values for what the file leaves out (-want +got):\n%s", diff)
	}

	if _, err := loadProject(writeProjectFile(t, head+"max_bufferd_requests: 10\n")); err == nil {
		t.Error("a misspelt scaling key was accepted")
	}
}
