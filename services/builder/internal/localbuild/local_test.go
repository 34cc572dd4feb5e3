package localbuild

import (
	"bytes"
	"errors"
	"io/fs"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/services/builder/internal/build"
)

// TestHostPathsAreHidden: the unpack directory shows as the archive root,
// the artifact root as <artifacts>, also when a path is split across two
// writes of the log; a build failure stays one, another error still
// unwraps to its cause.
func TestHostPathsAreHidden(t *testing.T) {
	hide := hostPaths("/root/.cache/sless/artifacts/.tmp/b-1-42", "/root/.cache/sless/artifacts")
	for in, want := range map[string]string{
		"/root/.cache/sless/artifacts/.tmp/b-1-42/index.js:3": "index.js:3",
		"cd /root/.cache/sless/artifacts/.tmp/b-1-42 failed":  "cd . failed",
		"into /root/.cache/sless/artifacts/python3.11/abc":    "into <artifacts>/python3.11/abc",
		"nothing to hide": "nothing to hide",
	} {
		if got := hide.String(in); got != want {
			t.Errorf("%q became %q, want %q", in, got, want)
		}
	}

	var out bytes.Buffer
	w := &scrubWriter{w: &out, hide: hide}
	for _, p := range []string{"Error at /root/.cache/sless/arti", "facts/.tmp/b-1-42/main.py:1\nnext line\npartial /root/.cache/sless/artifacts/.tmp/b-1-42/x"} {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	if diff := cmp.Diff("Error at main.py:1\nnext line\npartial x", out.String()); diff != "" {
		t.Errorf("log (-want +got):\n%s", diff)
	}

	be := hide.err(&archive.Error{Reason: build.ReasonSyntaxError, Message: "/root/.cache/sless/artifacts/.tmp/b-1-42/a.py:1: bad"})
	var got *archive.Error
	if !errors.As(be, &got) || got.Reason != build.ReasonSyntaxError || got.Message != "a.py:1: bad" {
		t.Errorf("build failure became %v", be)
	}
	other := hide.err(&fs.PathError{Op: "mkdir", Path: "/root/.cache/sless/artifacts/python3.11", Err: fs.ErrPermission})
	if other.Error() != "mkdir <artifacts>/python3.11: permission denied" || !errors.Is(other, fs.ErrPermission) {
		t.Errorf("other error became %q (still a permission error: %v)", other, errors.Is(other, fs.ErrPermission))
	}
}
