package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

// countingTransport counts the bytes of the object bodies it carries (not
// of error answers).
type countingTransport struct {
	base http.RoundTripper
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	// Only object reads: minio-go also GETs the bucket's location once.
	if err == nil && r.Method == http.MethodGet && resp.StatusCode < 300 && strings.Contains(r.URL.Path, "/builds/") {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// syncWriter is a buffer the follower writes while the test reads it.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Len()
}

// TestBuildLogFollowerFetchesOnlyNewBytes: following a growing log reads
// each byte from the object store once, however often it polls.
func TestBuildLogFollowerFetchesOnlyNewBytes(t *testing.T) {
	s3 := testenv.S3(t)
	base, err := minio.DefaultTransport(false)
	if err != nil {
		t.Fatal(err)
	}
	ct := &countingTransport{base: base}
	store, err := objstore.New(objstore.Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket, Transport: ct})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	key := objstore.BuildLogKey("t", "f", "b1")
	var log []byte
	put := func(lines int) {
		t.Helper()
		for i := range lines {
			log = append(log, strings.Repeat(string(rune('a'+i%26)), 99)+"\n"...)
		}
		if err := store.Put(ctx, key, bytes.NewReader(log), int64(len(log)), "text/plain"); err != nil {
			t.Fatal(err)
		}
	}
	put(1000) // 100 kB before the follower starts

	var ended atomic.Bool
	out := &syncWriter{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		followLog(ctx, out, store, key, true, func(context.Context) bool { return ended.Load() }, 5*time.Millisecond)
	}()
	waitFor := func(n int) {
		t.Helper()
		testenv.Eventually(t, 20*time.Second, fmt.Sprintf("the follower to write %d bytes", n), func() (bool, string) {
			got := out.Len()
			return got >= n, fmt.Sprintf("it wrote %d", got)
		})
	}
	waitFor(len(log))
	for range 3 {
		time.Sleep(50 * time.Millisecond) // several polls find nothing new
		put(500)
		waitFor(len(log))
	}
	ended.Store(true)
	<-done

	if !bytes.Equal(out.buf.Bytes(), log) {
		t.Fatalf("the follower wrote %d bytes, not the %d of the log", out.buf.Len(), len(log))
	}
	if got := ct.read.Load(); got != int64(len(log)) {
		t.Errorf("the follower fetched %d bytes for a log of %d", got, len(log))
	}
	t.Logf("log %d bytes, fetched %d", len(log), ct.read.Load())
}
