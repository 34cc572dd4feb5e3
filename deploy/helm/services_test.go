package helm

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/testenv"
)

// impersonating writes a kubeconfig that acts as the chart's ServiceAccount
// of component.
func impersonating(t *testing.T, base, component string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "system:serviceaccount:" + releaseNS + ":sless-" + component
	}
	p := filepath.Join(t.TempDir(), component+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestServicesRunAsTheirServiceAccounts builds the five services and runs
// them against the API server as the chart's ServiceAccounts (kubeconfigs
// that impersonate them, with the chart's RBAC applied), with the kubernetes
// drivers, and checks that their real reconcile loops and API calls work:
// a tenant reconciled, a function deployed, a build Job created, a cron
// trigger fired with its status updated, a queue trigger consumed with its
// broker URL read from a Secret.
func TestServicesRunAsTheirServiceAccounts(t *testing.T) {
	testenv.SteadyServers(t) // no broker or database outage of the module tests in the middle
	admin, err := client.New(kube.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	applyChartRBAC(t, admin)
	vhost, cleanup, err := testenv.RabbitVhost()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	baseKC, err := kube.Kubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.ServiceEnv(t, "")
	env["SLESS_RABBITMQ_URL"] = vhost
	env["LOG_LEVEL"] = "info"
	env["PATH"] = os.Getenv("PATH")
	env["HOME"] = os.Getenv("HOME")
	adminToken := strings.Repeat("a", 40)
	gwAddr := testenv.FreeAddr(t)

	bins := t.TempDir()
	var logs sync.Map
	for _, name := range []string{"gateway", "operator", "builder", "invoker", "scheduler"} {
		out := filepath.Join(bins, name)
		if b, err := exec.Command("go", "build", "-o", out, "../../services/"+name).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, b)
		}
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		e["KUBECONFIG"] = impersonating(t, baseKC, name)
		e["SLESS_OPS_ADDR"] = testenv.FreeAddr(t)
		e["SLESS_NAMESPACE"] = releaseNS
		switch name {
		case "gateway":
			e["SLESS_ADMIN_TOKEN"], e["SLESS_HTTP_ADDR"] = adminToken, gwAddr
		case "invoker":
			e["SLESS_EGRESS_ALLOW_CIDRS"] = "127.0.0.0/8" // the queue trigger's external broker is on loopback
		case "operator":
			e["SLESS_EXECUTION_DRIVER"] = "kubernetes"
			e["SLESS_QUOTA_CONTROLLER"] = "false" // envtest runs no kube-controller-manager
		case "builder":
			e["SLESS_BUILD_DRIVER"] = "kubernetes"
			e["SLESS_BUILD_NAMESPACE"] = "sless-builds"
			e["SLESS_BUILD_BASE_PYTHON311_IMAGE"] = "registry.example/python@sha256:" + zeros
			e["SLESS_BUILD_BASE_NODEJS20_IMAGE"] = "registry.example/node@sha256:" + zeros
			e["SLESS_BUILD_HELPER_IMAGE"] = "registry.example/builder@sha256:" + zeros
			e["SLESS_REGISTRY"] = "registry.example/functions"
		}
		cmd := exec.Command(out)
		for k, v := range e {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		buf := &testenv.SyncBuffer{}
		logs.Store(name, buf)
		cmd.Stdout, cmd.Stderr = buf, buf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); _ = cmd.Wait() })
		waitReady(t, name, "http://"+e["SLESS_OPS_ADDR"]+"/readyz", buf)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs.Range(func(k, v any) bool {
				t.Logf("--- %s log (tail):\n%s", k, tailOf(v.(*testenv.SyncBuffer).String(), 15))
				return true
			})
		}
	})

	api := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+gwAddr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	must := func(want int, method, path, token, body string) string {
		t.Helper()
		code, b := api(method, path, token, body)
		if code != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, code, want, b)
		}
		return b
	}
	ctx := t.Context()
	tenant := testenv.Name("rb")
	ns := slessv1.NamespaceFor(tenant)

	// Gateway (create a tenant) then operator (reconcile it).
	must(201, "POST", "/v1/tenants", adminToken, `{"name":"`+tenant+`"}`)
	var tok struct {
		Token string `json:"token"`
	}
	eventually(t, "tenant Ready (operator as its ServiceAccount)", func() (bool, string) {
		var tn slessv1.Tenant
		err := admin.Get(ctx, client.ObjectKey{Name: tenant}, &tn)
		return err == nil && tn.Status.Phase == slessv1.TenantReady, fmt.Sprintf("%v %+v", err, tn.Status)
	})
	_ = json.Unmarshal([]byte(must(201, "POST", "/v1/tenants/"+tenant+"/tokens", adminToken, `{}`)), &tok)

	// Operator: a function with a prebuilt image becomes version 1 and its Deployment.
	must(201, "POST", "/v1/tenants/"+tenant+"/functions", tok.Token,
		`{"name":"img","runtime":"python3.11","entrypoint":"main.handler","image":"registry.example/fn@sha256:`+zeros+`"}`)
	functionStatus := func(name string) string {
		var fn slessv1.Function
		err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &fn)
		return fmt.Sprintf("function %s: %v %+v", name, err, fn.Status)
	}
	eventually(t, "the function's Deployment", func() (bool, string) {
		return admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fn-img-v1"}, &appsv1.Deployment{}) == nil, functionStatus("img")
	})

	// Builder: an uploaded source becomes a build Job in the build namespace.
	must(201, "POST", "/v1/tenants/"+tenant+"/functions", tok.Token, `{"name":"src","runtime":"python3.11","entrypoint":"main.handler"}`)
	req, _ := http.NewRequest("PUT", "http://"+gwAddr+"/v1/tenants/"+tenant+"/functions/src/source", bytes.NewReader(zipFile()))
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	req.Header.Set("Content-Type", "application/zip")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("upload: %v %v", err, resp)
	}
	eventually(t, "a build Job (builder as its ServiceAccount)", func() (bool, string) {
		var jobs batchv1.JobList
		_ = admin.List(ctx, &jobs, client.InNamespace("sless-builds"), client.MatchingLabels{"sless.kube5s.ru/function": "src"})
		return len(jobs.Items) == 1, fmt.Sprintf("%d jobs; %s", len(jobs.Items), functionStatus("src"))
	})

	// Scheduler: a cron trigger fires and its status is patched.
	must(201, "POST", "/v1/tenants/"+tenant+"/triggers", tok.Token, `{"name":"tick","function":"img","type":"cron","cron":{"schedule":"@every 1s"}}`)
	triggerStatus := func(name string) string {
		var tr slessv1.Trigger
		err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &tr)
		return fmt.Sprintf("trigger %s: %v %+v", name, err, tr.Status)
	}
	eventually(t, "the trigger's lastFireTime (scheduler as its ServiceAccount)", func() (bool, string) {
		var tr slessv1.Trigger
		return admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tick"}, &tr) == nil && tr.Status.LastFireTime != nil, triggerStatus("tick")
	})
	db, err := pgxpool.New(ctx, env["SLESS_POSTGRES_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var fires int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM cron_fires WHERE tenant = $1 AND outcome = 'fired'`, tenant).Scan(&fires); err != nil || fires == 0 {
		t.Errorf("cron fires recorded: %d (%v)", fires, err)
	}

	// Invoker: a queue trigger on an "external" broker whose URL is in a Secret.
	if err := admin.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "broker", Namespace: ns}, StringData: map[string]string{"url": vhost}}); err != nil {
		t.Fatal(err)
	}
	must(201, "POST", "/v1/tenants/"+tenant+"/triggers", tok.Token,
		`{"name":"orders","function":"img","type":"queue","queue":{"queue":"rbac-orders","broker_secret":{"secret":"broker","key":"url"}}}`)
	conn, err := amqp.Dial(vhost)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	eventually(t, "the queue trigger's consumer (invoker as its ServiceAccount)", func() (bool, string) {
		ch, err := conn.Channel()
		if err != nil {
			return false, err.Error()
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive("rbac-orders", true, false, false, false, nil)
		return err == nil && q.Consumers == 1, fmt.Sprintf("queue: %v, %d consumers; %s", err, q.Consumers, triggerStatus("orders"))
	})
}

// applyChartRBAC applies the chart's namespaces, ServiceAccounts and roles.
func applyChartRBAC(t *testing.T, admin client.Client) {
	t.Helper()
	ensureNS(t, admin, releaseNS)
	manifest, err := render(load(t), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects(t, manifest) {
		switch o.GetKind() {
		case "Namespace":
			ensureNS(t, admin, o.GetName())
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			if err := admin.Create(t.Context(), o); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		}
	}
}

func waitReady(t *testing.T, name, url string, logs *testenv.SyncBuffer) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, name+" ready as its ServiceAccount", func() (bool, string) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return true, ""
			}
		}
		return false, "its log:\n" + tailOf(logs.String(), 20)
	})
}

// eventually waits up to a minute for cond, and says what it saw last
// (the object's status) when it gives up.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, what, cond)
}

func tailOf(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// zipFile is a zip holding main.py.
func zipFile() []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("main.py")
	fmt.Fprint(w, "def handler(event, context):\n    return 'ok'\n")
	_ = zw.Close()
	return buf.Bytes()
}
