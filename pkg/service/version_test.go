package service

import (
	"bytes"
	"strings"
	"testing"
)

func TestCommandAnswersVersionAndHelp(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out bytes.Buffer
		if !Command("gateway", "the public API", args, &out) {
			t.Fatalf("%v not handled", args)
		}
		if f := strings.Fields(out.String()); len(f) != 3 || f[0] != "sless-gateway" || f[1] != Version() || !strings.HasPrefix(f[2], "go1.") {
			t.Errorf("%v printed %q", args, out.String())
		}
	}
	var out bytes.Buffer
	if !Command("gateway", "the public API", []string{"--help"}, &out) || !strings.Contains(out.String(), "gateway: the public API") ||
		!strings.Contains(out.String(), "services/gateway/README.md") {
		t.Errorf("--help printed %q", out.String())
	}
	for _, args := range [][]string{nil, {"assemble"}, {"--other"}} {
		if Command("gateway", "x", args, &out) {
			t.Errorf("%v was handled", args)
		}
	}
}
