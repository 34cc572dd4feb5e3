package main

import (
	"io"
	"net"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestTraceUnreachableNamesTheSetting: without a traces backend where the
// CLI looks, the error says where it looked, why there, and which settings
// point it elsewhere.
func TestTraceUnreachableNamesTheSetting(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	_ = l.Close() // nothing listens there now
	for name, tc := range map[string]struct{ flag, env, want string }{
		"flag": {flag: closed, want: "from " + closed + " (--traces;"},
		"env":  {env: closed, want: "from " + closed + " (SLESS_TRACES_URL;"},
	} {
		t.Run(name, func(t *testing.T) {
			a := &app{getenv: func(k string) string {
				if k == "SLESS_TRACES_URL" {
					return tc.env
				}
				return ""
			}, stdout: io.Discard, stderr: io.Discard}
			cmd := &cobra.Command{}
			cmd.SetContext(t.Context())
			err := a.showTrace(cmd, nil, tc.flag, traceJSON{TraceID: "0123456789abcdef0123456789abcdef"})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--traces or SLESS_TRACES_URL") {
				t.Errorf("error %v, want it to contain %q and name --traces or SLESS_TRACES_URL", err, tc.want)
			}
		})
	}
}
