package cluster_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/callback"
	sless "github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/testenv"
)

// tenantUser is a tenant's user of the platform on the cluster, through
// the gateway's NodePort.
type tenantUser struct {
	base, name, tok string
	api             *sless.ClientWithResponses
}

func (u *tenantUser) url(path string) string { return u.base + "/v1/tenants/" + u.name + path }

// newTenant creates a tenant as the admin, issues it a token and waits
// until the tenant is Ready.
func newTenant(ctx context.Context, t *testing.T, base string, admin *sless.ClientWithResponses, name string, quotas *sless.TenantQuotas) *tenantUser {
	t.Helper()
	t.Cleanup(func() { testenv.DeleteTenantBroker(name) })
	if _, err := sless.Do(admin.CreateTenantWithResponse(ctx, sless.TenantInput{Name: name, Quotas: quotas})); err != nil {
		t.Fatalf("create tenant %s: %v", name, err)
	}
	issued, err := sless.Do(admin.CreateTokenWithResponse(ctx, name, sless.TokenInBody{Name: ptrTo("cluster")}))
	if err != nil {
		t.Fatalf("issue a token of %s: %v", name, err)
	}
	u := &tenantUser{base: base, name: name, tok: issued.JSON201.Token}
	if u.api, err = sless.New(base, u.tok, "sless-cluster-test"); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, 2*time.Minute, "tenant "+name+" Ready", func() (bool, string) {
		var out map[string]any
		if _, err := getJSON(u.url(""), u.tok, &out); err != nil {
			return false, err.Error()
		}
		return phase(out) == "Ready", fmt.Sprint(out["status"])
	})
	return u
}

type fnSpec struct {
	name    string
	runtime sless.FunctionInputRuntime
	entry   string
	files   map[string]string
	timeout int32 // seconds; 0 is 3
}

// deploy creates a function, uploads its code and follows the in-cluster
// build's log until the function is Ready; then it calls the new pod once.
// It returns the function's URL.
func (u *tenantUser) deploy(ctx context.Context, t *testing.T, cs kubernetes.Interface, f fnSpec) string {
	t.Helper()
	if _, err := sless.Do(u.api.CreateFunctionWithResponse(ctx, u.name, sless.FunctionInput{Name: f.name, Runtime: f.runtime,
		Entrypoint: f.entry, TimeoutSec: ptrTo(cmp.Or(f.timeout, 3))})); err != nil {
		t.Fatalf("create %s: %v", f.name, err)
	}
	start := time.Now()
	if _, err := sless.UploadZip(ctx, u.api, u.name, f.name, zipOf(t, f.files)); err != nil {
		t.Fatalf("upload %s: %v", f.name, err)
	}
	fnURL := u.url("/functions/" + f.name)
	var buildID string
	waitFor(ctx, t, time.Minute, "a build of "+f.name, func() (bool, string) {
		var out struct{ Items []struct{ ID string } }
		if _, err := getJSON(fnURL+"/builds", u.tok, &out); err != nil {
			return false, err.Error()
		}
		if len(out.Items) > 0 {
			buildID = out.Items[0].ID
		}
		return buildID != "", ""
	})
	log := follow(ctx, t, fnURL+"/builds/"+buildID+"/log?follow=true", u.tok)
	if !strings.Contains(log, "build succeeded") {
		t.Fatalf("the build log of %s does not end in success:\n%s", f.name, log)
	}
	t.Logf("build log of %s:\n%s", f.name, log)
	var fn map[string]any
	waitFor(ctx, t, 3*time.Minute, f.name+" Ready", func() (bool, string) {
		if _, err := getJSON(fnURL+"?wait=ready&timeout=30s", u.tok, &fn); err != nil {
			return false, err.Error()
		}
		return phase(fn) == "Ready", fmt.Sprint(fn["status"])
	})
	t.Logf("%s: zip upload to Ready (cold, in-cluster build): %s", f.name, time.Since(start).Round(time.Second))
	deploymentPinned(ctx, t, cs, u.name, f.name)

	// The first call of the new pod, a sync invoke that echoes.
	start = time.Now()
	status, body := post(t, fnURL+"/invoke", u.tok, `{"n":1}`)
	if status != 200 || !strings.Contains(body, `"n": 1`) && !strings.Contains(body, `"n":1`) {
		t.Fatalf("invoke %s: %d %s", f.name, status, body)
	}
	t.Logf("%s: first call %s", f.name, time.Since(start).Round(time.Millisecond))
	return fnURL
}

// invocation waits until the tenant's history holds a succeeded
// invocation that query selects, with a trace id, and returns it.
func (u *tenantUser) invocation(ctx context.Context, t *testing.T, what, query string) map[string]any {
	t.Helper()
	var found map[string]any
	waitFor(ctx, t, 2*time.Minute, what, func() (bool, string) {
		var out struct{ Items []map[string]any }
		if _, err := getJSON(u.url("/invocations?"+query), u.tok, &out); err != nil {
			return false, err.Error()
		}
		for _, inv := range out.Items {
			if inv["status"] == "succeeded" && inv["trace_id"] != "" && inv["trace_id"] != nil {
				found = inv
				return true, ""
			}
		}
		return false, fmt.Sprint(out.Items)
	})
	return found
}

// broker connects to the tenant's broker account (once the platform has
// made it) and opens a channel; the caller closes the connection.
func (u *tenantUser) broker(ctx context.Context, t *testing.T) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	var broker struct{ URL string }
	waitFor(ctx, t, time.Minute, "the tenant's broker account", func() (bool, string) {
		_, err := getJSON(u.url("/broker"), u.tok, &broker)
		return err == nil && broker.URL != "", fmt.Sprint(err)
	})
	conn, err := amqp.Dial(broker.URL)
	if err != nil {
		t.Fatalf("the tenant's broker URL: %v", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	return conn, ch
}

// checkTriggers: a cron schedule and a queue trigger invoke the function,
// and an async call with a callback delivers a signed result to the
// callback's receiver (on the node's address, which egress.allowCIDRs
// lets the invoker reach). Every invocation is in the history with its
// trace id.
func checkTriggers(ctx context.Context, t *testing.T, u *tenantUser, fn string) {
	t.Helper()
	if status, body := post(t, u.url("/triggers"), u.tok,
		`{"name":"tick","function":"`+fn+`","type":"cron","cron":{"schedule":"@every 5s"}}`); status != 201 {
		t.Fatalf("cron trigger: %d %s", status, body)
	}
	u.invocation(ctx, t, "a cron invocation", "trigger=cron")
	if status, body := send(t, "PATCH", u.url("/triggers/tick"), u.tok, `{"enabled":false}`, nil); status != 200 {
		t.Errorf("disable the cron trigger: %d %s", status, body)
	}

	if status, body := post(t, u.url("/triggers"), u.tok,
		`{"name":"orders","function":"`+fn+`","type":"queue","queue":{"queue":"orders"}}`); status != 201 {
		t.Fatalf("queue trigger: %d %s", status, body)
	}
	conn, ch := u.broker(ctx, t)
	defer conn.Close()
	waitFor(ctx, t, time.Minute, "the trigger's queue", func() (bool, string) {
		// A passive declare on a channel of its own: a missing queue
		// closes the channel.
		c, err := conn.Channel()
		if err != nil {
			return false, err.Error()
		}
		defer c.Close()
		_, err = c.QueueDeclarePassive("orders", true, false, false, false, nil)
		return err == nil, fmt.Sprint(err)
	})
	if err := ch.PublishWithContext(ctx, "", "orders", false, false, amqp.Publishing{ContentType: "application/json", Body: []byte(`{"via":"queue"}`)}); err != nil {
		t.Fatal(err)
	}
	u.invocation(ctx, t, "a queue invocation", "trigger=queue")

	// The callback's receiver checks the signature with the tenant's secret.
	var secret struct{ Secret string }
	if _, err := getJSON(u.url("/callback-secret"), u.tok, &secret); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", nodeIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if err := callback.Verify(secret.Secret, r.Header.Get(headers.Signature), b, time.Now()); err != nil {
			t.Errorf("a callback with a bad signature: %v", err)
		}
		select {
		case got <- string(b):
		default:
		}
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	status, body := send(t, "POST", u.url("/functions/"+fn+"/invoke"), u.tok, `{"via":"callback"}`,
		http.Header{"Prefer": {"respond-async"}, "X-Callback-Url": {"http://" + l.Addr().String() + "/done"}})
	if status != 202 {
		t.Fatalf("async invoke with a callback: %d %s", status, body)
	}
	id := acceptedID(t, body)
	select {
	case b := <-got:
		if !strings.Contains(b, id) || !strings.Contains(b, "succeeded") {
			t.Errorf("the callback carried %s, want invocation %s, succeeded", b, id)
		}
	case <-time.After(time.Minute):
		t.Fatal("no callback within a minute")
	}

	// Every invocation of the tenant so far is in the history with a
	// trace id: sync calls and the public trigger's (http), async, cron
	// and queue ones.
	waitFor(ctx, t, time.Minute, "every invocation in the history with a trace id", func() (bool, string) {
		var out struct{ Items []map[string]any }
		if _, err := getJSON(u.url("/invocations?limit=500"), u.tok, &out); err != nil {
			return false, err.Error()
		}
		kinds := map[string]int{}
		for _, inv := range out.Items {
			if id, _ := inv["trace_id"].(string); id == "" {
				return false, fmt.Sprintf("invocation %v (%v) has no trace id", inv["id"], inv["trigger"])
			}
			kinds[fmt.Sprint(inv["trigger"])]++
		}
		for _, k := range []string{"http", "async", "cron", "queue"} {
			if kinds[k] == 0 {
				return false, fmt.Sprintf("no %s invocation among %v", k, kinds)
			}
		}
		t.Logf("the history of %s: %v invocations by trigger, each with a trace id", u.name, kinds)
		return true, ""
	})
}

// probeScript defines probe(targets): a TCP connection to each host:port at
// once, answering "connected" or the error. The function pod (pyHandler)
// and the control pod run the same code.
const probeScript = `import json, socket, sys
from concurrent.futures import ThreadPoolExecutor

def probe(targets):
    def one(t):
        host, port = t.rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            return t, "connected"
        except OSError as e:
            return t, "%s: %s" % (type(e).__name__, e)
    with ThreadPoolExecutor(max(len(targets), 1)) as ex:
        return dict(ex.map(one, targets))
`

// checkNetworkPolicies: from a function pod of tenant a, connections to
// tenant b's function pod, to the platform's PostgreSQL and RabbitMQ, to the
// API server and to the metadata address fail. So that the failures are the
// policies' doing, the same connections succeed from a pod outside any
// policy, except to b's pod, whose own ingress policy refuses that pod too:
// there the control is the gateway, which reaches b's function. And the
// gateway and the invoker still reach a's function.
func checkNetworkPolicies(ctx context.Context, t *testing.T, cs kubernetes.Interface, a, b *tenantUser, fnA, fnB, probeImage string, platform []string) {
	t.Helper()
	pods, err := cs.CoreV1().Pods("sless-fn-"+b.name).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var podB string
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "fn-"+fnB) && p.Status.PodIP != "" && podReady(&p) {
			podB = p.Status.PodIP
		}
	}
	if podB == "" {
		t.Fatalf("no ready pod of %s/%s", b.name, fnB)
	}
	metadata := metadataListener(t)
	hosts := append([]string{metadata, "10.96.0.1:443"}, platform...)
	targets := append([]string{net.JoinHostPort(podB, "8080")}, hosts...)

	control := probeFromPod(ctx, t, cs, probeImage, hosts)
	for _, target := range hosts {
		if control[target] != "connected" {
			t.Errorf("from a pod outside any policy, %s: %q, want connected (the check below would prove nothing)", target, control[target])
		}
	}
	status, body := post(t, a.url("/functions/"+fnA+"/invoke"), a.tok, mustJSON(map[string]any{"connect": targets}))
	if status != 200 {
		t.Fatalf("the probe in %s's function: %d %s", a.name, status, body)
	}
	var fromFn map[string]string
	if err := json.Unmarshal([]byte(body), &fromFn); err != nil {
		t.Fatalf("the probe answered %s: %v", body, err)
	}
	for _, target := range targets {
		if r, ok := fromFn[target]; !ok || r == "connected" {
			t.Errorf("from %s's function pod, %s: %q, want a failed connection", a.name, target, r)
		}
	}
	t.Logf("from %s's function pod: %v", a.name, fromFn)

	// The gateway (sync) and the invoker (async) still reach a's function,
	// and the gateway reaches b's.
	if status, body := post(t, a.url("/functions/"+fnA+"/invoke"), a.tok, `{"n":7}`); status != 200 {
		t.Errorf("sync invoke of %s after the probe: %d %s", fnA, status, body)
	}
	if status, body := post(t, b.url("/functions/"+fnB+"/invoke"), b.tok, `{"n":8}`); status != 200 {
		t.Errorf("sync invoke of %s/%s: %d %s", b.name, fnB, status, body)
	}
	if status, body := postAsync(t, a.url("/functions/"+fnA+"/invoke"), a.tok, `{"n":9}`); status != 202 {
		t.Errorf("async invoke of %s after the probe: %d %s", fnA, status, body)
	} else {
		a.succeeded(ctx, t, acceptedID(t, body))
	}
}

// metadataListener answers on the cloud metadata address, added to the
// cluster's bridge (which hack/cluster.sh down removes), so that a
// connection there succeeds unless a policy stops it.
func metadataListener(t *testing.T) string {
	t.Helper()
	const addr = "169.254.169.254"
	if out, err := exec.Command("ip", "addr", "add", addr+"/32", "dev", "sless0").CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
		t.Fatalf("ip addr add %s: %v %s", addr, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "addr", "del", addr+"/32", "dev", "sless0").Run() })
	accept(t, addr+":80", func(c net.Conn) { _ = c.Close() })
	return addr + ":80"
}

// probeFromPod runs probeScript in a pod of a namespace without policies
// and returns what it found.
func probeFromPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, image string, targets []string) map[string]string {
	t.Helper()
	ns := testenv.Name("probe-")
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Spec: corev1.PodSpec{
		RestartPolicy:                corev1.RestartPolicyNever,
		AutomountServiceAccountToken: ptrTo(false),
		Containers: []corev1.Container{{Name: "probe", Image: image,
			Command: append([]string{"python3", "-c", probeScript + "print(json.dumps(probe(sys.argv[1:])))"}, targets...)}},
	}}
	// Refused until the namespace's default ServiceAccount exists.
	waitFor(ctx, t, time.Minute, "the control probe pod created", func() (bool, string) {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	waitFor(ctx, t, 2*time.Minute, "the control probe pod", func() (bool, string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, string(p.Status.Phase)
	})
	logs, err := cs.CoreV1().Pods(ns).GetLogs("probe", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	if err := json.Unmarshal(logs, &out); err != nil {
		t.Fatalf("the control probe printed %s: %v", logs, err)
	}
	t.Logf("from a pod outside any policy: %v", out)
	return out
}

// checkQuota: a tenant whose pod quota is used up gets a Function that
// says so (the Deployed condition), not a silent wait.
func checkQuota(ctx context.Context, t *testing.T, u *tenantUser, fn string) {
	t.Helper()
	waitFor(ctx, t, 2*time.Minute, fn+" to report the used-up quota", func() (bool, string) {
		var out struct {
			Status struct {
				Phase      string
				Conditions []struct{ Type, Status, Reason, Message string }
			}
		}
		if _, err := getJSON(u.url("/functions/"+fn), u.tok, &out); err != nil {
			return false, err.Error()
		}
		for _, c := range out.Status.Conditions {
			if c.Type == "Deployed" && c.Status == "False" && c.Reason == slessv1.ReasonQuotaExceeded && strings.Contains(c.Message, "exceeded quota") {
				t.Logf("%s over the quota: phase %s, Deployed: %s: %s", fn, out.Status.Phase, c.Reason, c.Message)
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", out.Status)
	})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// succeeded waits until invocation id of the tenant has succeeded, with a
// trace id, and returns its record.
func (u *tenantUser) succeeded(ctx context.Context, t *testing.T, id string) map[string]any {
	t.Helper()
	var inv map[string]any
	waitFor(ctx, t, 3*time.Minute, "invocation "+id, func() (bool, string) {
		if _, err := getJSON(u.url("/invocations/"+id), u.tok, &inv); err != nil {
			return false, err.Error()
		}
		return inv["status"] == "succeeded" && inv["trace_id"] != "" && inv["trace_id"] != nil, fmt.Sprint(inv)
	})
	return inv
}

// acceptedID reads the invocation id of a 202 answer.
func acceptedID(t *testing.T, body string) string {
	t.Helper()
	var accepted struct {
		InvocationID string `json:"invocation_id"`
	}
	if err := json.Unmarshal([]byte(body), &accepted); err != nil || accepted.InvocationID == "" {
		t.Fatalf("no invocation id in %s (%v)", body, err)
	}
	return accepted.InvocationID
}

// checkZero takes a deployed function to min_replicas 0 with a short
// scale-down delay on the real cluster: its Deployment goes to zero and
// its pods go; the first call is held by the gateway while a pod starts
// and answers 200 (no 502); and it goes back to zero.
func checkZero(ctx context.Context, t *testing.T, cs kubernetes.Interface, u *tenantUser, fn string) {
	t.Helper()
	fnURL := u.url("/functions/" + fn)
	if status, body := send(t, http.MethodPatch, fnURL, u.tok, `{"min_replicas":0,"scale_down_delay_seconds":3}`,
		http.Header{"Content-Type": {"application/merge-patch+json"}}); status != 200 {
		t.Fatalf("patch %s to min_replicas 0: %d %s", fn, status, body)
	}
	replicas := func() (int32, int, string) {
		deps, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return -1, -1, err.Error()
		}
		for _, d := range deps.Items {
			if strings.Contains(d.Namespace, u.name) && strings.Contains(d.Name, fn) {
				pods, err := cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
				if err != nil {
					return -1, -1, err.Error()
				}
				return *d.Spec.Replicas, len(pods.Items), fmt.Sprintf("deployment %s: %d replicas, %d pods", d.Name, *d.Spec.Replicas, len(pods.Items))
			}
		}
		return -1, -1, "no Deployment of " + fn
	}
	atZero := func() (bool, string) {
		n, pods, saw := replicas()
		return n == 0 && pods == 0, saw
	}
	start := time.Now()
	waitFor(ctx, t, 3*time.Minute, fn+" at zero", atZero)
	t.Logf("%s went to zero %s after the patch (scale-down delay 3 s)", fn, time.Since(start).Round(time.Second))

	start = time.Now()
	status, body := post(t, fnURL+"/invoke", u.tok, `{"n":5}`)
	if status != 200 {
		t.Fatalf("the first call at zero: %d %s", status, body)
	}
	t.Logf("%s: first call at zero answered 200 in %s (a pod started)", fn, time.Since(start).Round(time.Millisecond))
	if n, _, saw := replicas(); n != 1 {
		t.Errorf("after the wake: %s, want one replica", saw)
	}
	waitFor(ctx, t, 3*time.Minute, fn+" back at zero", atZero)

	// A backlog on its queue trigger (checkTriggers' "orders") wakes it,
	// and every message runs once.
	queued := func() (int, string) {
		var out struct{ Items []map[string]any }
		if _, err := getJSON(u.url("/invocations?trigger=queue&status=succeeded&limit=100"), u.tok, &out); err != nil {
			return -1, err.Error()
		}
		return len(out.Items), fmt.Sprintf("%d succeeded queue invocations", len(out.Items))
	}
	before, saw := queued()
	if before < 0 {
		t.Fatal(saw)
	}
	conn, ch := u.broker(ctx, t)
	defer conn.Close()
	const backlog = 5
	start = time.Now()
	for i := range backlog {
		if err := ch.PublishWithContext(ctx, "", "orders", false, false, amqp.Publishing{ContentType: "application/json",
			Body: []byte(fmt.Sprintf(`{"backlog":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(ctx, t, 3*time.Minute, "the backlog run after a wake", func() (bool, string) {
		n, saw := queued()
		return n >= before+backlog, saw
	})
	t.Logf("%s: a backlog of %d messages at zero ran in %s (a pod started)", fn, backlog, time.Since(start).Round(time.Millisecond))
	if n, saw := queued(); n != before+backlog {
		t.Errorf("%s after a backlog of %d on top of %d", saw, backlog, before)
	}
}
