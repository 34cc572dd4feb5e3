// Package localbuild is the local build driver: it unpacks and checks a
// source archive, installs its dependencies with the builder's own pip or
// npm, and keeps the result in a content-addressed artifact directory,
// the build cache, which a later build of the same source reuses.
package localbuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/services/builder/internal/build"
	"github.com/kube5s/sless/services/builder/internal/unpack"
)

// Driver unpacks the archive into a content-addressed directory
// <Root>/<runtime>/<source sha256>, installs dependencies when the archive
// declares them, and reuses a finished directory instead of building again.
// The source digest covers the lock files in the archive, so it is the
// whole key.
type Driver struct {
	Root           string
	Python         string
	Node           string
	Npm            string
	InstallTimeout time.Duration
	Limits         archive.Limits
	Validators     []unpack.Validator
	// Env is the whole environment of the package managers (InstallEnv):
	// none of the builder's own settings or credentials, since a tenant's
	// archive can make them run code (a local path in requirements.txt is
	// built by its own build backend).
	Env []string
}

const completeMarker = ".sless-artifact"

// Name is the driver's name in the build record.
func (l *Driver) Name() string { return "local" }

// Build builds j, or reuses the artifact of its source. What the user reads of it (the failure message
// and the log) never shows the build host's directories: a path below the
// unpack directory shows relative to the archive root, and the artifact
// root shows as <artifacts>.
func (l *Driver) Build(ctx context.Context, j *build.Job) (_ build.Artifact, err error) {
	final := filepath.Join(l.Root, j.Runtime, j.SourceSHA256)
	if _, err := os.Stat(filepath.Join(final, completeMarker)); err == nil {
		fmt.Fprintf(j.Log, "reusing the artifact of source %s built before\n", j.SourceSHA256[:12])
		return build.Artifact{Dir: final, Reused: true}, nil
	}
	tmpRoot := filepath.Join(l.Root, ".tmp")
	if err := os.MkdirAll(tmpRoot, 0o755); err != nil {
		return build.Artifact{}, err
	}
	tmp, err := os.MkdirTemp(tmpRoot, j.ID+"-")
	if err != nil {
		return build.Artifact{}, err
	}
	defer os.RemoveAll(tmp) // after a successful rename this is a no-op
	hide := hostPaths(tmp, l.Root)
	defer func() { err = hide.err(err) }()
	log := &scrubWriter{w: j.Log, hide: hide}
	defer log.Flush()
	j = &build.Job{ID: j.ID, Tenant: j.Tenant, Function: j.Function, Runtime: j.Runtime, Entrypoint: j.Entrypoint,
		SourceKey: j.SourceKey, SourceSHA256: j.SourceSHA256, AllowSourceBuilds: j.AllowSourceBuilds, Archive: j.Archive, Log: log}

	fmt.Fprintf(j.Log, "unpacking %d bytes\n", len(j.Archive))
	files, err := unpack.Archive(j.Archive, tmp, l.Limits)
	if err != nil {
		return build.Artifact{}, err
	}
	fmt.Fprintf(j.Log, "unpacked %d files\n", len(files))
	src := &unpack.Source{Dir: tmp, Runtime: j.Runtime, Entrypoint: j.Entrypoint, Files: files}
	for _, v := range l.Validators {
		fmt.Fprintf(j.Log, "check: %s\n", v.Name())
		if err := v.Validate(ctx, src); err != nil {
			return build.Artifact{}, err
		}
	}
	if err := l.install(ctx, j, tmp); err != nil {
		return build.Artifact{}, err
	}
	if err := os.WriteFile(filepath.Join(tmp, completeMarker), []byte(j.ID+"\n"), 0o644); err != nil {
		return build.Artifact{}, err
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return build.Artifact{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		// Another build of the same digest finished first: use its result.
		if _, serr := os.Stat(filepath.Join(final, completeMarker)); serr == nil {
			return build.Artifact{Dir: final, Reused: true}, nil
		}
		return build.Artifact{}, fmt.Errorf("move artifact into place: %w", err)
	}
	fmt.Fprintf(j.Log, "artifact ready\n")
	return build.Artifact{Dir: final}, nil
}

// install runs the language's package manager when the archive declares
// dependencies, with its output in the build log.
func (l *Driver) install(ctx context.Context, j *build.Job, dir string) error {
	var cmd []string
	switch j.Runtime {
	case string(slessv1.RuntimePython311):
		if !exists(filepath.Join(dir, "requirements.txt")) {
			return nil
		}
		cmd = []string{l.Python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-cache-dir",
			"--target", filepath.Join(dir, "deps"), "-r", "requirements.txt"}
		if !j.AllowSourceBuilds {
			cmd = append(cmd, "--only-binary=:all:")
		}
	case string(slessv1.RuntimeNodeJS20):
		if !exists(filepath.Join(dir, "package.json")) {
			return nil
		}
		if exists(filepath.Join(dir, "package-lock.json")) {
			cmd = []string{l.Npm, "ci", "--omit=dev", "--no-audit", "--no-fund", "--ignore-scripts"}
		} else {
			cmd = []string{l.Npm, "install", "--omit=dev", "--no-audit", "--no-fund", "--ignore-scripts"}
		}
	default:
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, l.InstallTimeout)
	defer cancel()
	fmt.Fprintf(j.Log, "$ %s %s\n", filepath.Base(cmd[0]), joinArgs(cmd[1:]))
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Dir, c.Stdout, c.Stderr = dir, j.Log, j.Log
	c.SysProcAttr = childAttr()
	c.WaitDelay = 10 * time.Second // a grandchild holding the log pipe must not stall the build
	c.Env = append(l.installEnv(), "npm_config_update_notifier=false", "HOME="+dir, "TMPDIR="+dir)
	if err := c.Run(); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return build.Fail(build.ReasonDependencies, "installing dependencies took longer than %s", l.InstallTimeout)
		}
		return build.Fail(build.ReasonDependencies, "%s failed (%v); the build log has its output", filepath.Base(cmd[0]), err)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return !errors.Is(err, fs.ErrNotExist)
}

func joinArgs(a []string) string { return strings.Join(a, " ") }

// pathHider replaces the build host's directories in text a user reads.
type pathHider struct{ r *strings.Replacer }

// hostPaths hides the unpack directory tmp (its files show relative to
// the archive root) and the artifact root, also in their resolved forms
// (a symlinked home or /tmp). Pairs are tried in order at each position,
// and tmp lies below root, so tmp comes first.
func hostPaths(tmp, root string) pathHider {
	var pairs []string
	add := func(dir, asDir, as string) {
		if dir == "" {
			return
		}
		forms := []string{dir}
		if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
			forms = append(forms, real)
		}
		for _, f := range forms {
			pairs = append(pairs, f+string(filepath.Separator), asDir, f, as)
		}
	}
	add(tmp, "", ".")
	add(root, "<artifacts>/", "<artifacts>")
	return pathHider{strings.NewReplacer(pairs...)}
}

func (h pathHider) String(s string) string { return h.r.Replace(s) }

// err returns err with the paths hidden, keeping its kind: a build
// failure stays one, other errors still unwrap to their cause.
func (h pathHider) err(err error) error {
	if err == nil {
		return nil
	}
	var be *archive.Error
	if errors.As(err, &be) {
		return &archive.Error{Reason: be.Reason, Message: h.String(be.Message)}
	}
	if msg := h.String(err.Error()); msg != err.Error() {
		return &hiddenError{msg: msg, err: err}
	}
	return err
}

type hiddenError struct {
	msg string
	err error
}

func (e *hiddenError) Error() string { return e.msg }
func (e *hiddenError) Unwrap() error { return e.err }

// scrubWriter hides host paths in a log stream line by line, so that a
// path split across two writes is still found.
type scrubWriter struct {
	w       io.Writer
	hide    pathHider
	pending []byte
}

func (s *scrubWriter) Write(p []byte) (int, error) {
	s.pending = append(s.pending, p...)
	cut := bytes.LastIndexByte(s.pending, '\n') + 1
	if cut == 0 && len(s.pending) < 16<<10 {
		return len(p), nil
	}
	if cut == 0 {
		cut = len(s.pending) // a line longer than any path is cut anyway
	}
	if _, err := io.WriteString(s.w, s.hide.String(string(s.pending[:cut]))); err != nil {
		return 0, err
	}
	s.pending = append(s.pending[:0], s.pending[cut:]...)
	return len(p), nil
}

// Flush writes what is left of an unfinished last line.
func (s *scrubWriter) Flush() {
	if len(s.pending) > 0 {
		_, _ = io.WriteString(s.w, s.hide.String(string(s.pending)))
		s.pending = s.pending[:0]
	}
}

// installEnvKeys are what a package manager may need of the builder's
// environment: the search path, locale, proxies, package indexes and CA
// certificates. Nothing else (the database, broker and object store
// settings) reaches the code that an install can run.
var installEnvKeys = []string{"PATH", "LANG", "LC_ALL", "TZ",
	"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
	"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_CERT",
	"npm_config_registry", "NPM_CONFIG_REGISTRY", "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS"}

// InstallEnv picks the package managers' environment out of the builder's.
func InstallEnv(getenv func(string) string) []string {
	var env []string
	for _, k := range installEnvKeys {
		if v := getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func (l *Driver) installEnv() []string {
	if l.Env == nil {
		return []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	}
	return append([]string(nil), l.Env...)
}
