package testenv

import (
	"strings"
	"testing"
)

func TestTailKeepsTheEnd(t *testing.T) {
	out := &tail{max: 10}
	for _, s := range []string{"abc", "defgh", "ijklmnop", "q"} {
		if n, err := out.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := out.String(); got != "hijklmnopq" {
		t.Fatalf("tail = %q, want the last 10 bytes %q", got, "hijklmnopq")
	}
	big := &tail{max: 4}
	_, _ = big.Write([]byte(strings.Repeat("x", 100) + "1234"))
	if got := big.String(); got != "1234" {
		t.Fatalf("tail of one large write = %q, want %q", got, "1234")
	}
}
