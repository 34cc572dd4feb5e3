package main

import (
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
	write := func(t *testing.T, body string) string {
		t.Helper()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, projectFile), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
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
