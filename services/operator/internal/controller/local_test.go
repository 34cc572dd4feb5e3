package controller

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/runtimes/contract"
	"github.com/kube5s/sless/services/operator/internal/driver"
)

var runtimesDir = filepath.Join("..", "..", "..", "..", "runtimes")

// artifact copies the fixture handlers into a fresh artifact directory, as
// the builder's local driver would leave them.
func artifact(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(runtimesDir, "fixtures", "handlers")
	for _, f := range []string{"main.py", "index.js"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A version marker the tests read back through the endpoint.
	marker := fmt.Sprintf("def handler(event, context):\n    return %q\n", version)
	if err := os.WriteFile(filepath.Join(dir, "version.py"), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func localHarness(t *testing.T) (*harness, *driver.Local) {
	var local *driver.Local
	h := newHarnessWith(t, func(mgr ctrl.Manager) driver.Driver {
		local = driver.NewLocal(driver.LocalCommands("python3", "node", runtimesDir), mgr.GetAPIReader(), t.TempDir(), quietLog())
		local.DrainDelay = 500 * time.Millisecond
		return local
	})
	t.Cleanup(local.Shutdown)
	h.local = local
	return h, local
}

// build plays the builder: it answers the function's build request with a
// successful result pointing at dir.
func (h *harness) build(t *testing.T, fn *slessv1.Function, dir string) {
	t.Helper()
	h.eventually(t, "build requested", func() bool {
		h.get(t, fn)
		return fn.Status.LastBuildID != "" && fn.Status.RequestedSourceSHA256 == fn.Spec.Source.SHA256
	})
	done := &msg.BuildCompleted{BuildID: fn.Status.LastBuildID, Namespace: fn.Namespace, Function: fn.Name,
		SourceSHA256: fn.Spec.Source.SHA256, Result: msg.BuildSucceeded, Artifact: dir}
	if err := h.pub.PublishMessage(t.Context(), done); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestLocalDriverRunsRestartsRollsAndStops(t *testing.T) {
	h, local := localHarness(t)
	_, ns := h.tenant(t)
	v1dir := artifact(t, "v1")
	fn := h.function(t, ns, "local", func(f *slessv1.Function) {
		withSource(sha1)(f)
		f.Spec.Entrypoint = "version.handler"
		f.Spec.TimeoutSec = 2
	})
	h.build(t, fn, v1dir)
	h.waitReady(t, fn)
	if code, body := get(t, fn.Status.Endpoint+"/"); code != 200 || body != "v1" {
		t.Fatalf("endpoint answered %d %q, want 200 v1", code, body)
	}

	// Kill the process: the driver restarts it and says so.
	endpoint := fn.Status.Endpoint
	pid := local.PID(ns, "local", 1)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "restart reported", func() bool {
		h.get(t, fn)
		return fn.IsReady() && strings.Contains(conditionMessage(fn, slessv1.ConditionDeployed), "restarted 1 times")
	})
	if code, body := get(t, fn.Status.Endpoint+"/"); code != 200 || body != "v1" {
		t.Fatalf("after restart the endpoint answered %d %q", code, body)
	}

	// Roll to a new version under a steady request loop: no request fails.
	var failures, served atomic.Int64
	var sawV2 atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var whyMu sync.Mutex
	why := map[string]int{}
	fail := func(reason string) {
		failures.Add(1)
		whyMu.Lock()
		why[reason]++
		whyMu.Unlock()
	}
	// The key is taken once: the test goroutine reads fn again meanwhile
	// (h.get decodes into it), and reading its name from the loops raced
	// with that (seen as "resource name may not be empty").
	key := client.ObjectKeyFromObject(fn)
	for range 4 {
		wg.Go(func() {
			hc := &http.Client{Timeout: 5 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Read the endpoint as the data plane does: from the
				// Function's status, on every request.
				cur := &slessv1.Function{}
				if err := h.c.Get(t.Context(), key, cur); err != nil {
					fail("read the function: " + err.Error())
					continue
				}
				resp, err := hc.Get(cur.Status.Endpoint + "/")
				if err != nil {
					fail(err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					fail(fmt.Sprintf("%d %s", resp.StatusCode, b))
					continue
				}
				served.Add(1)
				if string(b) == "v2" {
					sawV2.Store(true)
				}
			}
		})
	}
	h.eventually(t, "the load to be served", func() bool { return served.Load() >= 20 })
	v1Pid := local.PID(ns, "local", 1)
	fn.Spec.Source.SHA256 = sha2
	if err := h.c.Update(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	h.build(t, fn, artifact(t, "v2"))
	h.eventually(t, "v2 served", sawV2.Load)
	h.eventually(t, "the old process to finish its drain and exit", func() bool { return syscall.Kill(v1Pid, 0) != nil })
	close(stop)
	wg.Wait()
	t.Logf("rollout under load: %d requests served, %d failed", served.Load(), failures.Load())
	if failures.Load() != 0 {
		t.Errorf("%d requests failed during the rollout: %v", failures.Load(), why)
	}
	if _, err := http.Get(endpoint + "/"); err == nil {
		t.Error("the old version still answers after its drain")
	}

	// Delete: the process goes away, and so does its log file.
	h.get(t, fn)
	logPath := local.LogPath(ns, "local")
	if _, err := os.Stat(logPath); err != nil {
		t.Fatalf("the function's log file: %v", err)
	}
	newPid := local.PID(ns, "local", 2)
	if newPid == 0 || newPid == pid {
		t.Fatalf("serving pid %d after the rollout (was %d)", newPid, pid)
	}
	if err := h.c.Delete(t.Context(), fn); err != nil {
		t.Fatal(err)
	}
	h.eventually(t, "process gone", func() bool { return syscall.Kill(newPid, 0) != nil })
	h.eventually(t, "log file gone", func() bool { _, err := os.Stat(logPath); return errors.Is(err, fs.ErrNotExist) })
}

func conditionMessage(fn *slessv1.Function, typ string) string {
	for _, c := range fn.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

// TestContractFixturesThroughTheLocalDriver runs the shared fixtures against
// runtime processes the local driver started, for both languages.
func TestContractFixturesThroughTheLocalDriver(t *testing.T) {
	h, _ := localHarness(t)
	_, ns := h.tenant(t)
	dir := artifact(t, "fixtures")
	for _, rt := range []struct {
		name    string
		runtime slessv1.Runtime
		entry   string
	}{{"python", slessv1.RuntimePython311, "main.handler"}, {"node", slessv1.RuntimeNodeJS20, "index.handler"}} {
		t.Run(rt.name, func(t *testing.T) {
			fn := h.function(t, ns, "fixtures-"+rt.name, func(f *slessv1.Function) {
				withSource(sha1)(f)
				f.Spec.Runtime, f.Spec.Entrypoint = rt.runtime, rt.entry
			})
			h.build(t, fn, dir)
			h.waitReady(t, fn)
			contract.Run(t, fn.Status.Endpoint, fn.Name, strings.TrimPrefix(ns, "sless-fn-"))
		})
	}
}

// TestLocalDriverRunsAProcessSetPerVersion: two versions in one split run
// as two processes, each from its own artifact and told its number; the
// version that loses its traffic stops after the drain.
func TestLocalDriverRunsAProcessSetPerVersion(t *testing.T) {
	h, local := localHarness(t)
	_, ns := h.tenant(t)
	withEnv := func(version string) string {
		dir := artifact(t, version)
		code := fmt.Sprintf("import os\n\ndef handler(event, context):\n    return %q + \" \" + os.environ[\"SLESS_FUNCTION_VERSION\"]\n", version)
		if err := os.WriteFile(filepath.Join(dir, "version.py"), []byte(code), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	fn := h.function(t, ns, "set", func(f *slessv1.Function) {
		withSource(sha1)(f)
		f.Spec.Entrypoint = "version.handler"
	})
	h.build(t, fn, withEnv("a"))
	h.publishedAs(t, fn, 1)
	h.waitReady(t, fn)
	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Source.SHA256 = sha2 })
	h.build(t, fn, withEnv("b"))
	h.publishedAs(t, fn, 2)
	h.update(t, fn, func(f *slessv1.Function) {
		f.Spec.Traffic = []slessv1.TrafficTarget{{Version: 1, Percent: 50}, {Latest: true, Percent: 50}}
	})
	h.eventuallyShow(t, "both versions serving half", func() bool {
		h.get(t, fn)
		return len(fn.Status.Serving) == 2 && fn.Status.Serving[0].Ready && fn.Status.Serving[1].Ready &&
			fn.Status.Serving[0].Percent == 50 && fn.Status.Serving[1].Percent == 50
	}, func() string { return functionStatus(fn) })
	for i, want := range []string{"a 1", "b 2"} {
		if code, body := get(t, fn.Status.Serving[i].Endpoint+"/"); code != 200 || body != want {
			t.Errorf("version %d answered %d %q, want %q", i+1, code, body, want)
		}
	}
	p1, p2 := local.PID(ns, "set", 1), local.PID(ns, "set", 2)
	if p1 == 0 || p2 == 0 || p1 == p2 {
		t.Fatalf("pids %d and %d, want two processes", p1, p2)
	}

	h.update(t, fn, func(f *slessv1.Function) { f.Spec.Traffic = nil })
	h.eventually(t, "version 1's process stopped after its drain", func() bool {
		h.get(t, fn)
		return len(fn.Status.Serving) == 1 && local.PID(ns, "set", 1) == 0 && syscall.Kill(p1, 0) != nil
	})
	if code, body := get(t, fn.Status.Endpoint+"/"); code != 200 || body != "b 2" {
		t.Errorf("latest answered %d %q", code, body)
	}
}

// TestLoadRunsSeveralLocalProcessesOfAVersion: in the local profile the
// scaler's count is the number of processes of the version. Under load
// the version runs two, each on its own port and listed in
// status.serving[].endpoints for the data plane to spread calls over;
// after the load, back to one, and the other process exits.
func TestLoadRunsSeveralLocalProcessesOfAVersion(t *testing.T) {
	h, _ := localHarness(t)
	_, ns := h.tenant(t)
	fn := h.function(t, ns, "many", func(f *slessv1.Function) {
		withSource(sha1)(f)
		f.Spec.Entrypoint = "version.handler"
		f.Spec.Concurrency = 10 // a target of 7 in flight per process
		f.Spec.Scaling = &slessv1.Scaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 3, ScaleDownDelaySeconds: 1}
	})
	h.build(t, fn, artifact(t, "a"))
	h.waitReady(t, fn)

	stop := h.reportLoad(t, ns, "many", 13)
	h.eventuallyShow(t, "two processes for 13 in flight", func() bool {
		h.get(t, fn)
		e := servingEntry(fn, 1)
		return e != nil && e.ReadyReplicas == 2 && len(e.Endpoints) == 2 && e.MaxReplicas == 3
	}, func() string { return functionStatus(fn) })
	e := servingEntry(fn, 1)
	if e.Endpoints[0] == e.Endpoints[1] {
		t.Fatalf("both processes listed at %s", e.Endpoints[0])
	}
	for _, ep := range e.Endpoints {
		if code, body := get(t, ep+"/"); code != 200 || body != "a" {
			t.Errorf("the process at %s answered %d %q", ep, code, body)
		}
	}
	if e.Endpoint != e.Endpoints[0] && e.Endpoint != e.Endpoints[1] {
		t.Errorf("endpoint %s is none of the processes %v", e.Endpoint, e.Endpoints)
	}
	stop()

	// The burst put the scaler in panic mode, which holds the count for
	// its stable window (60 s) after the last report.
	testenv.Eventually(t, 3*time.Minute, "one process after the load", func() (bool, string) {
		h.get(t, fn)
		e := servingEntry(fn, 1)
		return e != nil && e.ReadyReplicas == 1 && len(e.Endpoints) == 0, functionStatus(fn)
	})
	gone := e.Endpoints[1]
	if gone == servingEntry(fn, 1).Endpoint {
		gone = e.Endpoints[0]
	}
	h.eventually(t, "the second process stopped", func() bool {
		code, _ := get(t, gone+"/")
		return code == 0
	})
}
