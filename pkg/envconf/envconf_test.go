package envconf

import (
	"strings"
	"testing"
	"time"
)

func TestReaderReportsEveryProblemAtOnce(t *testing.T) {
	env := map[string]string{"PORT": "70000", "WAIT": "soon", "URL": "ftp://x", "FLAG": "maybe", "MODE": "cluster"}
	r := New(func(k string) string { return env[k] })
	r.Int("PORT", 8080, 1, 65535)
	r.Duration("WAIT", time.Second)
	r.URL("URL", "", "http", "https")
	r.Bool("FLAG", false)
	r.OneOf("MODE", "local", "local", "kubernetes")
	r.Required("MISSING", "the broker URL")
	err := r.Err()
	if err == nil {
		t.Fatal("no error for six bad values")
	}
	for _, want := range []string{"PORT", "WAIT", "URL", "FLAG", "MODE", "MISSING is required"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %s:\n%v", want, err)
		}
	}
}

func TestReaderDefaultsAndValues(t *testing.T) {
	env := map[string]string{"PORT": "9000", "WAIT": "2s", "FLAG": "true"}
	r := New(func(k string) string { return env[k] })
	if got := r.Int("PORT", 1, 1, 65535); got != 9000 {
		t.Errorf("PORT = %d", got)
	}
	if got := r.Duration("WAIT", time.Second); got != 2*time.Second {
		t.Errorf("WAIT = %s", got)
	}
	if got := r.Bool("FLAG", false); !got {
		t.Error("FLAG = false")
	}
	if got := r.String("UNSET", "def"); got != "def" {
		t.Errorf("UNSET = %q", got)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
}
