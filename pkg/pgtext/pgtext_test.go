package pgtext

import "testing"

func TestClean(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"grüße ✓", "grüße ✓"},
		{"bad\x00byte", "bad\uFFFDbyte"},
		{"\x00\x00", "\uFFFD\uFFFD"},
		{"half \xc3 rune", "half \uFFFD rune"},
		{"\xff\xfe", "\uFFFD"},
		{"both\x00\xff", "both\uFFFD\uFFFD"},
	} {
		if got := Clean(c.in); got != c.want {
			t.Errorf("Clean(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
