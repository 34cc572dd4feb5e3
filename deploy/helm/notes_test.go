package helm

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kube5s/sless/pkg/testenv"
)

// renderNotes renders the chart's NOTES.txt as helm install prints it.
func renderNotes(t *testing.T, c *chart.Chart, vals map[string]any) string {
	t.Helper()
	rel, err := dryRun(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	return rel.Info.Notes
}

// gatewayPart splits the NOTES commands after the one that checks the
// gateway's /healthz: what comes before depends on how the gateway is
// exposed, what comes after is the same for every install.
func gatewayPart(t *testing.T, cmds []string) (gateway, rest []string) {
	t.Helper()
	for i, c := range cmds {
		if strings.Contains(c, "/healthz") {
			return cmds[:i+1], cmds[i+1:]
		}
	}
	t.Fatalf("no command checks $GW/healthz in %q", cmds)
	return nil, nil
}

var sendsBody = regexp.MustCompile(`\s(-d|--data|--data-binary|--data-raw)\s`)

// TestNotesCommands renders the NOTES for every way the gateway is exposed
// and checks their commands: shell syntax, a Content-Type on every curl
// that sends a body (the gateway answers 415 without one), the way to the
// gateway that the values chose, and the same commands after it for every
// install (hack/cluster's TestHelmInstall runs the NodePort notes whole and
// the ClusterIP notes' gateway part against a real install).
func TestNotesCommands(t *testing.T) {
	c := load(t)
	variants := map[string]map[string]any{"Ingress": {"ingress": map[string]any{"enabled": true, "host": "functions.example.com"}}}
	for typ, vals := range serviceTypes {
		variants[typ] = vals
	}
	want := map[string]*regexp.Regexp{
		"ClusterIP":    regexp.MustCompile(`^kubectl -n sless-system port-forward service/sless-gateway 8080:80`),
		"NodePort":     regexp.MustCompile(`get service sless-gateway -o jsonpath='\{\.spec\.ports\[\?\(@\.name=="http"\)\]\.nodePort\}'`),
		"LoadBalancer": regexp.MustCompile(`get service sless-gateway -o jsonpath='\{\.status\.loadBalancer\.ingress\[0\]\.ip\}`),
		"Ingress":      regexp.MustCompile(`^export GW=https://functions\.example\.com$`),
	}
	var common []string
	for name, vals := range variants {
		t.Run(name, func(t *testing.T) {
			notes := renderNotes(t, c, vals)
			cmds := testenv.NotesCommands(notes)
			if len(cmds) < 8 {
				t.Fatalf("%d commands in the NOTES:\n%s", len(cmds), notes)
			}
			sh := exec.Command("bash", "-n")
			sh.Stdin = strings.NewReader(strings.Join(cmds, "\n"))
			if out, err := sh.CombinedOutput(); err != nil {
				t.Errorf("the NOTES commands are not valid shell: %v\n%s", err, out)
			}
			for _, cmd := range cmds {
				if strings.HasPrefix(cmd, "curl") || strings.Contains(cmd, "$(curl") {
					if sendsBody.MatchString(cmd) && !strings.Contains(cmd, "Content-Type: ") {
						t.Errorf("a curl that sends a body without a Content-Type (the gateway answers 415): %s", cmd)
					}
				}
			}
			gw, rest := gatewayPart(t, cmds)
			found := false
			for _, cmd := range gw {
				found = found || want[name].MatchString(cmd)
				if name != "ClusterIP" && strings.Contains(cmd, "port-forward") {
					t.Errorf("the %s notes point to a port-forward: %s", name, cmd)
				}
			}
			if !found {
				t.Errorf("no command of the %s notes matches %s:\n%s", name, want[name], strings.Join(gw, "\n"))
			}
			if common == nil {
				common = rest
			} else if diff := cmp.Diff(common, rest); diff != "" {
				t.Errorf("the commands after the gateway's differ between installs (-one +%s):\n%s", name, diff)
			}
		})
	}
}

// TestHelmTestHookTrimsToken runs the helm test hook's Python script (as
// the chart renders it) against an HTTP server that plays the gateway, with
// the Secret's values ending in a newline as a Secret made from a file
// does: the script sends the token without it and passes.
func TestHelmTestHookTrimsToken(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed to run the helm test hook's script")
	}
	manifest, err := render(load(t), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var script string
	for _, o := range objects(t, manifest) {
		if o.GetKind() == "Pod" && o.GetName() == "sless-test-invoke" {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "containers")
			args := containers[0].(map[string]any)["args"].([]any)
			script = args[0].(string)
		}
	}
	if script == "" {
		t.Fatal("no helm test Pod sless-test-invoke rendered")
	}
	var mu sync.Mutex
	var seen []string
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer tok-123" || !strings.HasPrefix(r.URL.Path, "/v1/tenants/acme/functions/helm-test") {
			http.Error(w, "wrong token or tenant", http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == "GET":
			_ = json.NewEncoder(w).Encode(map[string]any{"status": map[string]any{"phase": "Ready"}})
		case strings.HasSuffix(r.URL.Path, "/invoke"):
			_, _ = w.Write([]byte(`"helm test ok"`))
		default:
			_, _ = w.Write([]byte(`{}`))
		}
	}))
	defer gw.Close()
	cmd := exec.Command("python3", "-c", script)
	cmd.Env = append(os.Environ(), "GW="+gw.URL, "TENANT=acme\n", "TOKEN=tok-123\n")
	out, err := cmd.CombinedOutput()
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		t.Errorf("the helm test hook failed with a token Secret ending in a newline: %v\n%s\nrequests: %q", err, out, seen)
	}
}
