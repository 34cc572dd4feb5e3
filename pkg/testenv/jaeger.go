package testenv

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"
)

// JaegerQuery is where the Jaeger all-in-one that make dev and the tests
// run answers its query API; it receives OTLP on 127.0.0.1:4318.
const JaegerQuery = "http://127.0.0.1:16686"

// Jaeger makes sure a Jaeger all-in-one receives OTLP on 127.0.0.1:4318
// and answers its query API: the shared one of hack/deps.sh (jaeger up),
// started if none runs. No test owns it, so none stops it under another.
func Jaeger(t testing.TB) {
	t.Helper()
	if listening("127.0.0.1:4318") && listening("127.0.0.1:16686") {
		return
	}
	script := os.Getenv("SLESS_DEPS_SCRIPT")
	if script == "" {
		t.Fatal("SLESS_DEPS_SCRIPT is not set: run the tests through make test (hack/deps.sh env)")
	}
	if out, err := exec.Command(script, "jaeger", "up").CombinedOutput(); err != nil {
		t.Fatalf("%s jaeger up: %v\n%s", script, err, out)
	}
}

func listening(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// TraceHas waits until Jaeger holds trace id with, for each service, spans
// of those names.
func TraceHas(t testing.TB, id string, want map[string][]string) {
	t.Helper()
	if id == "" {
		t.Fatal("no trace id (X-Trace-Id on the response)")
	}
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing = missing[:0]
		got := map[string]map[string]bool{}
		resp, err := http.Get(JaegerQuery + "/api/traces/" + id)
		if err == nil {
			var body struct {
				Data []struct {
					Spans []struct {
						OperationName string `json:"operationName"`
						ProcessID     string `json:"processID"`
					} `json:"spans"`
					Processes map[string]struct {
						ServiceName string `json:"serviceName"`
					} `json:"processes"`
				} `json:"data"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			for _, tr := range body.Data {
				for _, sp := range tr.Spans {
					svc := tr.Processes[sp.ProcessID].ServiceName
					if got[svc] == nil {
						got[svc] = map[string]bool{}
					}
					got[svc][sp.OperationName] = true
				}
			}
		}
		for svc, names := range want {
			for _, n := range names {
				if !got[svc][n] {
					missing = append(missing, svc+": "+n)
				}
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s lacks %v (has %v)", id, missing, got)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
