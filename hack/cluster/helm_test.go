package cluster_test

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	sless "github.com/kube5s/sless/pkg/client"
	"github.com/kube5s/sless/pkg/testenv"
)

const (
	nodeIP      = "10.244.0.1" // hack/cluster.sh's NODE_IP
	release     = "sless"
	releaseNS   = "sless-system"
	buildNS     = "sless-builds"
	gatewayPort = 30080 // the gateway's NodePort
)

// TestHelmInstall installs the chart (deploy/helm/sless) on the one-node
// cluster as a platform team does, with the guide's own commands:
// hack/cluster.sh try runs docs/install.md's install-test blocks against
// the images `make images` built (ko), the runtime bases, and PostgreSQL,
// RabbitMQ and MinIO of this machine bridged to the cluster. Then the
// chart's NOTES are run, the ops ports are checked unreachable from node
// ports, and, through the gateway's NodePort, as a user: a tenant, a
// Python and a Node function built in the cluster (deps step, then
// assemble and push), invoked; two versions of a function answering a
// 90/10 split; then helm test, and helm uninstall keeping
// the CRDs and the tenants' objects.
func TestHelmInstall(t *testing.T) {
	testenv.SteadyServers(t)
	registry := preflight(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "hack/cluster.sh")
	helm := helmBinary(t, root)
	// The images first: ko and the runtime bases take minutes when cold,
	// and the cluster need not wait for them.
	bases := lines(t, root, nil, "hack/runtime-bases.sh", "push")
	for k, v := range bases {
		// Pulled by the node and fetched by the build's assemble step in a
		// pod: the registry by the node's address (forwarded below).
		bases[k] = strings.Replace(v, registry, nodeIP+":"+port(t, registry), 1)
	}

	cluster(t, script, "down")
	t.Cleanup(func() { cluster(t, script, "down") })

	// docs/install.md's one command (hack/cluster.sh try): the machine's
	// servers bridged to the node's address, then the guide's own
	// commands (namespaces, Secrets, helm install) with a database, a
	// vhost and a bucket of this test.
	pg := testenv.Postgres(t)
	vhost, dropVhost, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dropVhost)
	s3 := testenv.S3(t)
	// Traces go to a Jaeger on this machine (OTLP on 127.0.0.1:4318).
	testenv.Jaeger(t)
	adminToken := testenv.Name("admin-") + testenv.Name("") + testenv.Name("") + testenv.Name("") // 46 characters
	start := time.Now()
	try := exec.Command("bash", script, "try")
	try.Dir = root
	try.Env = append(os.Environ(), "TRY_POSTGRES_URL="+pg, "TRY_RABBITMQ_URL="+vhost, "TRY_S3_BUCKET="+s3.Bucket, "ADMIN_TOKEN="+adminToken)
	var tryErr bytes.Buffer
	try.Stderr = &tryErr
	tryOut, err := try.Output()
	t.Logf("hack/cluster.sh try:\n%s", tryErr.String())
	if err != nil {
		t.Fatalf("hack/cluster.sh try: %v\n%s", err, tryErr.String())
	}
	t.Logf("hack/cluster.sh try (cluster up, the guide's commands, helm install to every pod Ready): %s", time.Since(start).Round(time.Second))
	if !strings.Contains(string(tryOut), "export ADMIN='"+adminToken+"'") || !strings.Contains(string(tryOut), fmt.Sprintf("export GW='http://%s:%d'", nodeIP, gatewayPort)) {
		t.Errorf("hack/cluster.sh try printed %q, want the gateway's URL and the admin token", tryOut)
	}
	env := clusterEnv(t, script)
	kubeconfig := env["KUBECONFIG"]
	valuesFile := filepath.Join(env["SLESS_CLUSTER_DIR"], "try", "values.yaml")
	cs := client(t, kubeconfig)
	t.Cleanup(func() { // before the cluster goes down
		if t.Failed() {
			dumpPods(t, cs, releaseNS, buildNS)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	pods, err := cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && !podReady(&p) {
			t.Errorf("pod %s is running but not Ready", p.Name)
		}
	}

	// 2. As a user, through the gateway's NodePort (kube-proxy programs it
	// a moment after the pods are Ready).
	base := fmt.Sprintf("http://%s:%d", nodeIP, gatewayPort)
	waitFor(ctx, t, time.Minute, "the gateway on its NodePort", func() (bool, string) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	// The ops port (/readyz, /metrics) is on no node port: every node port
	// of the release's Services answers no /metrics.
	svcs, err := cs.CoreV1().Services(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, svc := range svcs.Items {
		for _, p := range svc.Spec.Ports {
			if p.NodePort == 0 {
				continue
			}
			u := fmt.Sprintf("http://%s:%d/metrics", nodeIP, p.NodePort)
			if resp, err := http.Get(u); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 || strings.Contains(string(b), "# TYPE") {
					t.Errorf("%s (Service %s, port %s) answered the metrics: %d %.200s", u, svc.Name, p.Name, resp.StatusCode, b)
				}
			}
		}
	}
	// The chart's NOTES, run as they are printed: they reach the gateway on
	// its node port, create the tenant acme and deploy and call a function.
	notes := strings.TrimPrefix(helmRun(t, helm, kubeconfig, "get", "notes", release, "-n", releaseNS), "NOTES:\n")
	notesCmds := testenv.NotesCommands(notes)
	sh := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(notesCmds, "\n"))
	sh.Dir = t.TempDir()
	sh.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	if out, err := sh.CombinedOutput(); err != nil || !strings.Contains(string(out), "hello from sless") {
		t.Errorf("the NOTES commands (%d) failed: %v\n%s", len(notesCmds), err, out)
	}
	admin, err := sless.New(base, adminToken, "sless-cluster-test")
	if err != nil {
		t.Fatal(err)
	}
	a := newTenant(ctx, t, base, admin, testenv.Name("helm"), nil)
	tenant, tok := a.name, a.tok
	fnURL := a.deploy(ctx, t, cs, fnSpec{"hello-py", sless.FunctionInputRuntimePython311, "main.handler", map[string]string{"main.py": pyHandler}, 0})
	// A timeout long enough for a pod to start: a call waits for its
	// version to wake at most that long (checkZero).
	a.deploy(ctx, t, cs, fnSpec{"hello-node", sless.FunctionInputRuntimeNodejs20, "index.handler", map[string]string{"index.js": nodeHandler}, 30})
	// Versions: two uploads, a 90/10 split over 2,000 calls back to back
	// (a tenant of its own, over the default rate of 100 a second), then
	// the function deleted with its versions' Deployments.
	checkSplit(ctx, t, cs, newTenant(ctx, t, base, admin, testenv.Name("helmv"), &sless.TenantQuotas{InvocationsPerSecond: ptrTo(int32(100000))}), s3, registry)

	// 6. A timeout in a function pod answers 504, and the pod keeps serving.
	if status, body := post(t, fnURL+"/invoke", tok, `{"spin":true}`); status != 504 {
		t.Errorf("a runaway handler answered %d %s, want 504", status, body)
	}
	if status, body := post(t, fnURL+"/invoke", tok, `{"n":2}`); status != 200 {
		t.Errorf("after a timeout: %d %s", status, body)
	}
	// What the handler printed, read from the pod's log through the API
	// (the gateway's pods/log permission), with the invocation's id.
	waitFor(ctx, t, time.Minute, "the handler's print in the function's logs", func() (bool, string) {
		req, _ := http.NewRequestWithContext(ctx, "GET", fnURL+"/logs?tail=200", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			var rec struct {
				Message      string `json:"message"`
				InvocationID string `json:"invocation_id"`
			}
			if json.Unmarshal([]byte(l), &rec) == nil && strings.Contains(rec.Message, `handled {"n": 2}`) && rec.InvocationID != "" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d %.2000s", resp.StatusCode, b)
	})

	// 3. Async with polling (its trace in the collector), a public HTTP
	// trigger, a cron schedule, a queue trigger and a callback.
	status, body := postAsync(t, fnURL+"/invoke", tok, `{"n":3}`)
	if status != 202 {
		t.Fatalf("async invoke: %d %s", status, body)
	}
	inv := a.succeeded(ctx, t, acceptedID(t, body))
	testenv.TraceHas(t, fmt.Sprint(inv["trace_id"]), map[string][]string{"gateway": {"POST /v1/tenants/{t}/functions/{name}/invoke"},
		"invoker": {"sless.invoker.invocation-requested process", "invoke hello-py"}})
	if status, body := post(t, base+"/v1/tenants/"+tenant+"/triggers", tok,
		`{"name":"web","function":"hello-node","type":"http","http":{"path":"/hello","auth":"none"}}`); status != 201 {
		t.Fatalf("http trigger: %d %s", status, body)
	}
	waitFor(ctx, t, time.Minute, "the public trigger", func() (bool, string) {
		resp, err := http.Post(base+"/fn/"+tenant+"/hello", "application/json", strings.NewReader(`{"via":"trigger"}`))
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200 && strings.Contains(string(b), "trigger"), fmt.Sprintf("%d %s", resp.StatusCode, b)
	})

	checkTriggers(ctx, t, a, "hello-node")
	checkZero(ctx, t, cs, a, "hello-node")

	// 4 and 5. A second tenant whose pod quota (one) its first function
	// uses up: the second function says so. From a function pod of the
	// first tenant, the second tenant's pod, the platform's servers, the API
	// server and the metadata address are out of reach.
	other := newTenant(ctx, t, base, admin, testenv.Name("helmb"), &sless.TenantQuotas{MaxPods: ptrTo(int32(1))})
	other.deploy(ctx, t, cs, fnSpec{"target", sless.FunctionInputRuntimePython311, "main.handler", map[string]string{"main.py": pyHandler}, 0})
	if _, err := sless.Do(other.api.CreateFunctionWithResponse(ctx, other.name, sless.FunctionInput{Name: "over", Runtime: sless.FunctionInputRuntimePython311,
		Entrypoint: "main.handler"})); err != nil {
		t.Fatalf("create over: %v", err)
	}
	if _, err := sless.UploadZip(ctx, other.api, other.name, "over", zipOf(t, map[string]string{"main.py": pyHandler})); err != nil {
		t.Fatalf("upload over: %v", err)
	}
	checkQuota(ctx, t, other, "over")
	checkNetworkPolicies(ctx, t, cs, a, other, "hello-py", "target", bases["python3.11"], []string{
		nodeIP + ":" + port(t, hostOf(t, pg)), nodeIP + ":" + port(t, hostOf(t, vhost)), nodeIP + ":" + env["SLESS_CLUSTER_API_PORT"],
	})

	// 8. helm upgrade with a changed value while async invocations are in
	// flight: none is lost.
	var ids []string
	for i := range 20 {
		status, body := postAsync(t, fnURL+"/invoke", tok, fmt.Sprintf(`{"n":%d}`, 100+i))
		if status != 202 {
			t.Fatalf("async invoke %d: %d %s", i, status, body)
		}
		ids = append(ids, acceptedID(t, body))
	}
	start = time.Now()
	helmRun(t, helm, kubeconfig, "upgrade", release, filepath.Join(root, "deploy/helm/sless"), "-n", releaseNS,
		"-f", valuesFile, "--set", "gateway.replicas=2", "--wait", "--timeout", "10m")
	t.Logf("helm upgrade (gateway replicas 2): %s", time.Since(start).Round(time.Second))
	for _, id := range ids {
		a.succeeded(ctx, t, id)
	}
	if gw, err := cs.AppsV1().Deployments(releaseNS).Get(ctx, "sless-gateway", metav1.GetOptions{}); err != nil || gw.Status.ReadyReplicas != 2 {
		t.Errorf("after the upgrade the gateway has %v ready replicas (%v)", gw.Status.ReadyReplicas, err)
	}

	// 7. helm test, with a token of the tenant.
	testToken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sless-test-token"}, StringData: map[string]string{"tenant": tenant + "\n", "token": tok + "\n"}} // as a Secret made from files
	if _, err := cs.CoreV1().Secrets(releaseNS).Create(ctx, testToken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	helmRun(t, helm, kubeconfig, "test", release, "-n", releaseNS, "--timeout", "5m")

	// 9. helm uninstall removes the platform and keeps the CRDs and the
	// tenants' objects.
	helmRun(t, helm, kubeconfig, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "5m")
	deps, err := cs.AppsV1().Deployments(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil || len(deps.Items) != 0 {
		t.Errorf("after uninstall, the release namespace has %d Deployments (%v)", len(deps.Items), err)
	}
	functions, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/sless.kube5s.ru/v1alpha1/functions").DoRaw(ctx)
	if err != nil || !strings.Contains(string(functions), `"hello-py"`) {
		t.Errorf("after uninstall, the Functions: %v %.500s", err, functions)
	}
}

// pyHandler echoes its JSON body, spins on {"spin": true} and probes
// connections on {"connect": ["host:port", ...]}.
const pyHandler = probeScript + `
def handler(event, context):
    body = event.get("json") or {}
    if body.get("spin"):
        while True:
            pass
    if "connect" in body:
        return probe(body["connect"])
    print("handled", json.dumps(body, sort_keys=True))
    return body
`

const nodeHandler = `exports.handler = async (event) => event.json || {};
`

// helmBinary builds the pinned helm command line (hack/tools/helm) once
// into the cache.
func helmBinary(t *testing.T, root string) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(root, "hack/cluster.sh"), "helm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/cluster.sh helm: %v %s", err, stderrOf(err))
	}
	return strings.TrimSpace(string(out))
}

func helmRun(t *testing.T, helm, kubeconfig string, args ...string) string {
	t.Helper()
	cmd := exec.Command(helm, append(args, "--kubeconfig", kubeconfig)...)
	out, err := cmd.CombinedOutput()
	t.Logf("helm %s:\n%s", strings.Join(args[:2], " "), out)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// lines runs a script of the repository that prints "<name> <value>"
// lines and returns them as a map.
func lines(t *testing.T, root string, env []string, args ...string) map[string]string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(root, args[0])}, args[1:]...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			m[k] = v
		}
	}
	return m
}

var digestRE = regexp.MustCompile(`@(sha256:[0-9a-f]{64})$`)

func hostOf(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

func port(t *testing.T, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// accept listens on addr until the test ends and hands each connection to
// handle in a goroutine of its own.
func accept(t *testing.T, addr string, handle func(net.Conn)) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	})
}

// dumpPods logs the status and the last lines of every container of the
// pods in namespaces and in every tenant's function namespace (sless-fn-*),
// with restarts and why the last run ended, and the namespaces' warning
// events (every event in a function namespace: a pod's Killing is Normal).
// fnNamespacePrefix begins the name of every tenant's function namespace.
var fnNamespacePrefix = slessv1.NamespaceFor("")

func dumpPods(t *testing.T, cs kubernetes.Interface, namespaces ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fns, err := cs.CoreV1().RESTClient().Get().AbsPath("/apis/sless.kube5s.ru/v1alpha1/functions").DoRaw(ctx)
	t.Logf("functions (%v): %s", err, fns)
	all, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("namespaces: %v", err)
	} else {
		for _, ns := range all.Items {
			if strings.HasPrefix(ns.Name, fnNamespacePrefix) {
				namespaces = append(namespaces, ns.Name)
			}
		}
	}
	// logs prints the last lines of a container's current or previous run.
	logs := func(ns, pod, container, what string, previous bool) {
		tail := int64(40)
		b, err := cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: &tail, Previous: previous}).DoRaw(ctx)
		t.Logf("pod %s/%s container %s, %s (%v):\n%s", ns, pod, container, what, err, b)
	}
	for _, ns := range namespaces {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("pods of %s: %v", ns, err)
			continue
		}
		for _, p := range pods.Items {
			for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				if st.RestartCount > 0 || st.LastTerminationState.Terminated != nil {
					t.Logf("pod %s/%s container %s: %d restarts, last run ended: %+v", ns, p.Name, st.Name, st.RestartCount, st.LastTerminationState.Terminated)
					logs(ns, p.Name, st.Name, "its previous run", true)
				}
			}
			for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				logs(ns, p.Name, c.Name, "pod "+string(p.Status.Phase), false)
			}
		}
		opts := metav1.ListOptions{FieldSelector: "type=Warning"}
		if strings.HasPrefix(ns, fnNamespacePrefix) {
			opts = metav1.ListOptions{}
		}
		events, _ := cs.CoreV1().Events(ns).List(ctx, opts)
		for _, e := range events.Items {
			t.Logf("event %s/%s: %s %s %s", ns, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func deploymentPinned(ctx context.Context, t *testing.T, cs kubernetes.Interface, tenant, fn string) {
	t.Helper()
	deps, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var found *appsv1.Deployment
	for i, d := range deps.Items {
		if strings.Contains(d.Namespace, tenant) && strings.Contains(d.Name, fn) {
			found = &deps.Items[i]
		}
	}
	if found == nil {
		t.Fatalf("no Deployment of %s/%s", tenant, fn)
	}
	img := found.Spec.Template.Spec.Containers[0].Image
	if !digestRE.MatchString(img) {
		t.Errorf("the Deployment of %s runs %s, not pinned by digest", fn, img)
	}
	t.Logf("%s runs %s", fn, img)
}

func waitFor(ctx context.Context, t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, d, what, func() (bool, string) {
		ok, state := cond()
		if !ok && ctx.Err() != nil {
			t.Fatalf("%v waiting for %s; last: %s", ctx.Err(), what, state)
		}
		return ok, state
	})
}

func getJSON(u, tok string, out any) (int, error) {
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return resp.StatusCode, fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, b)
	}
	return resp.StatusCode, json.Unmarshal(b, out)
}

func post(t *testing.T, u, tok, body string) (int, string) {
	t.Helper()
	return send(t, "POST", u, tok, body, nil)
}

// postAsync asks for an asynchronous invocation (Prefer: respond-async).
func postAsync(t *testing.T, u, tok, body string) (int, string) {
	t.Helper()
	return send(t, "POST", u, tok, body, http.Header{"Prefer": {"respond-async"}})
}

func send(t *testing.T, method, u, tok, body string, extra http.Header) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.Header = extra.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func follow(ctx context.Context, t *testing.T, u, tok string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String()
}

func phase(obj map[string]any) string {
	st, _ := obj["status"].(map[string]any)
	p, _ := st["phase"].(string)
	return p
}

func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, content := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(content))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

func ptrTo[T any](v T) *T { return &v }
