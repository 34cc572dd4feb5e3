package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/testenv"
	"github.com/kube5s/sless/services/gateway/internal/logs"
)

// The API additions the CLI and the Terraform provider need (issue 18).

// TestPutTakesWhatGetReturns: GET, edit, PUT works for functions, triggers
// and jobs; read-only fields are ignored; a name that is not the path's is
// a 422 that names body.name and changes nothing.
func TestPutTakesWhatGetReturns(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	base := "/v1/tenants/" + ten
	expect(t, g.call(t, "POST", base+"/functions", tok, fnBody), 201, "create function")
	expect(t, g.call(t, "POST", base+"/triggers", tok, map[string]any{"name": "web", "function": "hello", "type": "http", "http": map[string]any{"path": "/web"}}), 201, "create trigger")
	expect(t, g.call(t, "POST", base+"/jobs", tok, map[string]any{"name": "nightly", "function": "hello", "payload": map[string]any{"n": 1}}), 201, "create job")

	for _, tc := range []struct {
		path, field string
		value       any
	}{
		{base + "/functions/hello", "memory_mb", 256.0},
		{base + "/triggers/web", "enabled", false},
		{base + "/jobs/nightly", "timeout_sec", 42.0},
	} {
		r := g.call(t, "GET", tc.path, tok, nil)
		expect(t, r, 200, "GET "+tc.path)
		obj := r.json(t)
		for _, ro := range []string{"name", "status", "created_at"} {
			if _, ok := obj[ro]; !ok {
				t.Fatalf("GET %s has no %s: %s", tc.path, ro, r.body)
			}
		}
		obj[tc.field] = tc.value
		r = g.call(t, "PUT", tc.path, tok, obj)
		expect(t, r, 200, "PUT what GET returned, edited: "+tc.path)
		if got := r.json(t)[tc.field]; got != tc.value {
			t.Errorf("%s after PUT: %s = %v, want %v", tc.path, tc.field, got, tc.value)
		}

		// Read-only fields that do not match are ignored...
		obj["status"] = r.json(t)["status"]
		obj["created_at"] = "2001-01-01T00:00:00Z"
		expect(t, g.call(t, "PUT", tc.path, tok, obj), 200, "PUT with another created_at")
		if got := g.call(t, "GET", tc.path, tok, nil).json(t)["created_at"]; got == "2001-01-01T00:00:00Z" {
			t.Errorf("%s: created_at was written", tc.path)
		}
		// ... the name is not.
		obj["name"] = "other"
		r = g.call(t, "PUT", tc.path, tok, obj)
		expect(t, r, 422, "PUT with another name: "+tc.path)
		if !strings.Contains(string(r.body), "body.name") {
			t.Errorf("the 422 does not name body.name: %s", r.body)
		}
		// Without a name, the path's is used.
		delete(obj, "name")
		expect(t, g.call(t, "PUT", tc.path, tok, obj), 200, "PUT without a name: "+tc.path)
	}
	// A PUT that names another object created nothing.
	var fl slessv1.FunctionList
	if err := g.kube.List(t.Context(), &fl, client.InNamespace(slessv1.NamespaceFor(ten))); err != nil || len(fl.Items) != 1 {
		t.Errorf("functions after the refused rename: %d (%v), want 1", len(fl.Items), err)
	}
	// The function's uploaded source stays; a source in the body is ignored.
	r := g.call(t, "PUT", base+"/functions/hello/source", tok, zipOf(t, map[string]string{"main.py": "def handler(e, c):\n    return 'hi'\n"}), "Content-Type", "application/zip")
	expect(t, r, 200, "upload")
	sha := r.json(t)["sha256"]
	obj := g.call(t, "GET", base+"/functions/hello", tok, nil).json(t)
	obj["source"] = map[string]any{"sha256": strings.Repeat("0", 64), "s3_key": "sources/other/x.zip"}
	r = g.call(t, "PUT", base+"/functions/hello", tok, obj)
	expect(t, r, 200, "PUT with another source")
	if got := r.json(t)["source"].(map[string]any)["sha256"]; got != sha {
		t.Errorf("source after PUT %v, want the uploaded %v", got, sha)
	}
}

// settle plays the operator: the function's current generation is Ready
// (or Failed) with its conditions.
func (g *gw) settle(t testing.TB, tenant, name string, phase slessv1.FunctionPhase) {
	t.Helper()
	var f slessv1.Function
	if err := g.kube.Get(t.Context(), client.ObjectKey{Namespace: slessv1.NamespaceFor(tenant), Name: name}, &f); err != nil {
		t.Fatal(err)
	}
	f.Status.Phase, f.Status.ObservedGeneration = phase, f.Generation
	built, reason := metav1.ConditionTrue, "Built"
	if phase == slessv1.FunctionFailed {
		built, reason = metav1.ConditionFalse, slessv1.ReasonBuildFailed
	}
	meta.SetStatusCondition(&f.Status.Conditions, metav1.Condition{Type: slessv1.ConditionBuilt, Status: built, Reason: reason, Message: "m"})
	if phase == slessv1.FunctionReady {
		f.Status.Endpoint = "http://127.0.0.1:1"
		meta.SetStatusCondition(&f.Status.Conditions, metav1.Condition{Type: slessv1.ConditionDeployed, Status: metav1.ConditionTrue, Reason: slessv1.ReasonRolledOut, Message: "m"})
	}
	if err := g.kube.Status().Update(t.Context(), &f); err != nil {
		t.Fatal(err)
	}
}

// gauge reads a gauge of the gateway's /metrics.
func (g *gw) gauge(t testing.TB, series string) float64 {
	t.Helper()
	res, err := http.Get("http://" + g.env["SLESS_OPS_ADDR"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// waitGauge waits until a gauge has the value want.
func (g *gw) waitGauge(t testing.TB, series string, want float64) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("%s = %v", series, want), func() (bool, string) {
		got := g.gauge(t, series)
		return got == want, fmt.Sprintf("%s = %v", series, got)
	})
}

const waitGaugeSeries = `sless_gateway_long_requests{kind="wait"}`

// TestWaitForReady: GET ?wait=ready answers when the function becomes
// Ready or Failed for its current spec, or at the timeout with the
// function as it is and X-Sless-Wait: timeout; a client that goes away
// ends its wait.
func TestWaitForReady(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	_, other := g.tenant(t, nil)
	path := "/v1/tenants/" + ten + "/functions/hello"
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/functions", tok, fnBody), 201, "create")

	r := g.call(t, "GET", path+"?wait=ready&timeout=300ms", tok, nil)
	expect(t, r, 200, "wait that times out")
	if w := r.header.Get(headers.Wait); w != "timeout" || r.json(t)["name"] != "hello" {
		t.Errorf("X-Sless-Wait %q, body %s", w, r.body)
	}
	if w := g.call(t, "GET", path, tok, nil).header.Get(headers.Wait); w != "" {
		t.Errorf("a plain GET has X-Sless-Wait %q", w)
	}
	expect(t, g.call(t, "GET", path+"?wait=ready&timeout=soon", tok, nil), 422, "bad timeout")
	expect(t, g.call(t, "GET", path+"?wait=ready&timeout=-1s", tok, nil), 422, "negative timeout")
	expect(t, g.call(t, "GET", path+"?wait=forever", tok, nil), 422, "unknown wait")
	expect(t, g.call(t, "GET", path+"?wait=ready&timeout=1s", other, nil), 403, "another tenant's token")
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/functions/nope?wait=ready&timeout=1s", tok, nil), 404, "unknown function")

	// A wait in flight answers when the operator marks the function Ready.
	before := g.gauge(t, waitGaugeSeries)
	got := make(chan resp, 1)
	start := time.Now()
	go func() { got <- g.call(t, "GET", path+"?wait=ready&timeout=60s", tok, nil) }()
	g.waitGauge(t, waitGaugeSeries, before+1)
	g.settle(t, ten, "hello", slessv1.FunctionReady)
	select {
	case r := <-got:
		expect(t, r, 200, "wait for ready")
		if w := r.header.Get(headers.Wait); w != "ready" || r.json(t)["status"].(map[string]any)["phase"] != "Ready" {
			t.Errorf("X-Sless-Wait %q, body %s", w, r.body)
		}
		t.Logf("the wait answered %v after it started", time.Since(start).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not answer when the function became Ready")
	}

	// Ready for the previous spec is not ready: a changed spec waits for
	// the operator.
	expect(t, g.call(t, "PATCH", path, tok, `{"memory_mb": 256}`, "Content-Type", "application/merge-patch+json"), 200, "patch")
	r = g.call(t, "GET", path+"?wait=ready&timeout=300ms", tok, nil)
	if w := r.header.Get(headers.Wait); w != "timeout" {
		t.Errorf("a function Ready for its previous spec: X-Sless-Wait %q", w)
	}
	g.settle(t, ten, "hello", slessv1.FunctionFailed)
	r = g.call(t, "GET", path+"?wait=ready&timeout=10s", tok, nil)
	if w := r.header.Get(headers.Wait); w != "failed" {
		t.Errorf("a failed function: X-Sless-Wait %q", w)
	}

	// A client that goes away ends its wait.
	expect(t, g.call(t, "PATCH", path, tok, `{"memory_mb": 512}`, "Content-Type", "application/merge-patch+json"), 200, "patch")
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "GET", g.base+path+"?wait=ready&timeout=5m", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	g.waitGauge(t, waitGaugeSeries, before+1)
	cancel()
	<-done
	g.waitGauge(t, waitGaugeSeries, before)
}

// printer is a handler that prints, as a tenant's code would, and on
// /hostile prints what could break a log stream.
const printer = `import os, sys

def handler(event, context):
    print("hello from", context.invocation_id)
    print("to stderr", file=sys.stderr)
    if event["path"] == "/hostile":
        os.write(1, b"raw \x00 nul \xff\xfe bad utf8\n")
        print("x" * 2000000)
        print("after the hostile lines")
    return "ok"
`

// runPrinter starts the Python wrapper on printer the way the operator's
// local driver does: its stdout and stderr appended to the function's log
// file. It returns the runtime's endpoint.
func runPrinter(t *testing.T, logFile string) string {
	t.Helper()
	code := t.TempDir()
	if err := os.WriteFile(filepath.Join(code, "main.py"), []byte(printer), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	return testenv.PythonRuntime(t, runtimesDir, code, out, "SLESS_FUNCTION=printer", "SLESS_FUNCTION_VERSION=3", "PYTHONUNBUFFERED=1")
}

func invokeDirect(t *testing.T, ep, path, id string) {
	t.Helper()
	req, _ := http.NewRequest("GET", ep+path, nil)
	req.Header.Set(headers.InvocationID, id)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 {
		t.Fatalf("invoke %s: %d %s", path, res.StatusCode, b)
	}
}

type logRecord struct {
	Time         time.Time `json:"time"`
	Stream       string    `json:"stream"`
	Level        string    `json:"level"`
	Message      string    `json:"message"`
	InvocationID string    `json:"invocation_id"`
	Version      int32     `json:"function_version"`
	Truncated    bool      `json:"truncated"`
}

const logsGaugeSeries = `sless_gateway_long_requests{kind="logs"}`

// TestFunctionLogs: what a function printed, read and followed through the
// API from the local driver's log file, one JSON record per line with its
// stream and invocation id; a hostile function's NUL bytes, invalid UTF-8
// and megabyte line do not break the stream; another tenant cannot read
// it; a follow ends when its client goes away.
func TestFunctionLogs(t *testing.T) {
	g := gateway(t)
	ten, tok := g.tenant(t, nil)
	_, other := g.tenant(t, nil)
	expect(t, g.call(t, "POST", "/v1/tenants/"+ten+"/functions", tok, map[string]any{"name": "printer", "runtime": "python3.11", "entrypoint": "main.handler"}), 201, "create")
	path := "/v1/tenants/" + ten + "/functions/printer/logs"

	// Nothing printed yet: an empty stream.
	r := g.call(t, "GET", path, tok, nil)
	expect(t, r, 200, "logs before any output")
	if len(r.body) != 0 || r.header.Get("Content-Type") != "application/x-ndjson" {
		t.Errorf("empty log: %q, %s", r.body, r.header.Get("Content-Type"))
	}

	ep := runPrinter(t, filepath.Join(g.env["SLESS_FUNCTION_LOG_DIR"], slessv1.NamespaceFor(ten)+"_printer.log"))
	invokeDirect(t, ep, "/", "inv-one")

	var recs []logRecord
	testenv.Eventually(t, 10*time.Second, "a record of the handler's print", func() (bool, string) {
		r = g.call(t, "GET", path+"?tail=100", tok, nil)
		expect(t, r, 200, "logs")
		recs = decodeRecords(t, r.body)
		return find(recs, "hello from inv-one") != nil, string(r.body)
	})
	hello := find(recs, "hello from inv-one")
	if hello == nil {
		t.Fatalf("no record of the handler's print in %s", r.body)
	}
	// The process runs version 3 (SLESS_FUNCTION_VERSION, as the local
	// driver gives it): every record of it says so.
	if hello.Stream != "stdout" || hello.InvocationID != "inv-one" || hello.Version != 3 || hello.Time.IsZero() || time.Since(hello.Time) > time.Minute {
		t.Errorf("print record %+v", hello)
	}
	if e := find(recs, "to stderr"); e == nil || e.Stream != "stderr" || e.InvocationID != "inv-one" || e.Version != 3 {
		t.Errorf("stderr record %+v", e)
	}
	if l := find(recs, "handler loaded"); l == nil || l.Stream != "runtime" || l.InvocationID != "" || l.Version != 3 {
		t.Errorf("runtime record %+v", l)
	}
	r = g.call(t, "GET", path+"?tail=1", tok, nil)
	if n := len(decodeRecords(t, r.body)); n != 1 {
		t.Errorf("tail=1 gave %d records: %s", n, r.body)
	}
	r = g.call(t, "GET", path+"?since=1ms", tok, nil)
	expect(t, r, 200, "since")
	if find(decodeRecords(t, r.body), "hello from inv-one") != nil {
		t.Errorf("since=1ms still has the old print: %s", r.body)
	}

	expect(t, g.call(t, "GET", path, other, nil), 403, "another tenant's token")
	expect(t, g.call(t, "GET", "/v1/tenants/"+ten+"/functions/nope/logs", tok, nil), 404, "unknown function")
	expect(t, g.call(t, "GET", path+"?since=yesterday", tok, nil), 422, "bad since")
	expect(t, g.call(t, "GET", path+"?tail=100000", tok, nil), 422, "tail over its limit")

	// Follow: records written after the request arrive while it is open.
	before := g.gauge(t, logsGaugeSeries)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", g.base+path+"?follow=true&tail=0", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("follow: %d", res.StatusCode)
	}
	g.waitGauge(t, logsGaugeSeries, before+1)
	invokeDirect(t, ep, "/hostile", "inv-hostile")
	lines := make(chan []byte)
	go func() {
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(lines)
	}()
	var followed []logRecord
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the follow ended early; got %+v", followed)
			}
			var rec logRecord
			if err := json.Unmarshal(l, &rec); err != nil {
				t.Fatalf("a followed line is not JSON: %v: %q", err, l)
			}
			followed = append(followed, rec)
			done = rec.Message == "after the hostile lines"
		case <-time.After(20 * time.Second):
			t.Fatalf("no 'after the hostile lines' within 20s; got %+v", followed)
		}
	}
	if h := find(followed, "hello from inv-hostile"); h == nil || h.InvocationID != "inv-hostile" {
		t.Errorf("followed print %+v", h)
	}
	var raw, big *logRecord
	for i := range followed {
		switch {
		case strings.HasPrefix(followed[i].Message, "raw "):
			raw = &followed[i]
		case strings.HasPrefix(followed[i].Message, "xxxx"):
			big = &followed[i]
		}
	}
	if raw == nil || raw.Stream != "raw" || raw.Message != "raw \uFFFD nul \uFFFD bad utf8" {
		t.Errorf("raw line with NUL and invalid UTF-8: %+v", raw)
	}
	if big == nil || !big.Truncated || len(big.Message) > 16<<10 || big.Stream != "stdout" || big.InvocationID != "inv-hostile" {
		if big != nil {
			big.Message = big.Message[:20] + "..."
		}
		t.Errorf("megabyte line: %+v", big)
	}
	// The client goes away: the follow ends.
	cancel()
	g.waitGauge(t, logsGaugeSeries, before)

	// A tenant holds at most 8 follows open on a gateway.
	fctx, fcancel := context.WithCancel(t.Context())
	for i := 0; i < 8; i++ {
		req, _ := http.NewRequestWithContext(fctx, "GET", g.base+path+"?follow=true&tail=0", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("follow %d: %v %v", i, res, err)
		}
		defer res.Body.Close()
	}
	r = g.call(t, "GET", path+"?follow=true&tail=0", tok, nil)
	expect(t, r, 429, "a ninth follow")
	if r.header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	expect(t, g.call(t, "GET", path+"?tail=1", tok, nil), 200, "a read without follow beside them")
	fcancel()
	g.waitGauge(t, logsGaugeSeries, before)
}

func decodeRecords(t *testing.T, b []byte) []logRecord {
	t.Helper()
	var out []logRecord
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var r logRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("not a JSON record: %q", l)
		}
		out = append(out, r)
	}
	return out
}

func find(recs []logRecord, msg string) *logRecord {
	for i := range recs {
		if recs[i].Message == msg {
			return &recs[i]
		}
	}
	return nil
}

// TestPodLogsFollowNewReplicas: in the kubernetes profile a follow reads
// the function's running pods through pods/log and, through a watch, the
// pods that start later. The test API server has no kubelet, so each read
// ends in the API server's refusal (no such node), which the stream
// reports per replica; the requests, the label selection and the watch
// are the real ones.
func TestPodLogsFollowNewReplicas(t *testing.T) {
	ctx := t.Context()
	c, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(kube.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.Name("logs")
	for _, o := range []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}}} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name, function string, running bool) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{slessv1.LabelFunction: function, slessv1.LabelVersion: "2"}},
			Spec: corev1.PodSpec{NodeName: "no-such-node", AutomountServiceAccountToken: new(bool),
				Containers: []corev1.Container{{Name: logs.Container, Image: "fn@sha256:" + strings.Repeat("0", 64)}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if running {
			p.Status.Phase = corev1.PodRunning
			if err := c.Status().Update(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	pod("f-1", "f", true)
	pod("other-1", "other", true) // another function's pod: never read

	sctx, cancel := context.WithCancel(ctx)
	got := make(chan logs.Record, 10)
	done := make(chan error, 1)
	go func() {
		done <- logs.Pods{Client: cs}.Stream(sctx, ns, "f", logs.Options{Follow: true, Tail: 10}, func(r logs.Record) error { got <- r; return nil })
	}()
	next := func() logs.Record {
		t.Helper()
		select {
		case r := <-got:
			return r
		case <-time.After(20 * time.Second):
			t.Fatal("no record within 20s")
			return logs.Record{}
		}
	}
	if r := next(); r.Pod != "f-1" || r.Stream != "runtime" || r.Level != "warn" || r.FunctionVersion != 2 {
		t.Fatalf("first replica's record %+v", r)
	}
	pod("f-2", "f", false) // pending: nothing to read yet
	var p corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "f-2"}, &p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if err := c.Status().Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	if r := next(); r.Pod != "f-2" {
		t.Fatalf("a replica that started later: %+v", r)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follow did not end with its context")
	}
	select {
	case r := <-got:
		t.Errorf("unexpected record %+v", r)
	default:
	}
}
