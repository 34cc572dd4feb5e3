package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/testenv"
)

// stallingProxy stands between a client and the real MinIO: it forwards
// until stall, after which every connection is accepted (or kept) and
// never answered, as a hung object store does.
type stallingProxy struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex
	stalled bool
	conns   []net.Conn
}

func newStallingProxy(t *testing.T, backend string) *stallingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallingProxy{ln: ln, backend: backend}
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			stalled := p.stalled
			p.mu.Unlock()
			if !stalled {
				go p.forward(c)
			} // stalled: held open, never read nor answered
		}
	}()
	return p
}

func (p *stallingProxy) forward(c net.Conn) {
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, b)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(b, c); _ = b.Close() }()
	_, _ = io.Copy(c, b)
	_ = c.Close()
}

// stall closes the forwarding connections, so that the client dials again
// and is held.
func (p *stallingProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestHungLogUploadFailsTheUploadNotTheBuilder: when the object store stops
// answering, the log's final upload gives up after its timeout with an
// error that says so, instead of holding the build (and its replica's
// slot) forever; the periodic upload stops with Close as well.
func TestHungLogUploadFailsTheUploadNotTheBuilder(t *testing.T) {
	s3 := testenv.S3(t)
	proxy := newStallingProxy(t, s3.Endpoint)
	store, err := objstore.New(objstore.Config{Endpoint: proxy.ln.Addr().String(), AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	key := objstore.BuildLogKey("acme", "fx", "b-hung")
	const timeout = 500 * time.Millisecond
	l := NewLog(t.Context(), store, key, 50*time.Millisecond, timeout, 1<<20)

	// The store answers: the periodic upload reaches MinIO.
	fmt.Fprintln(l, "step 1")
	testenv.Eventually(t, 30*time.Second, "the periodic upload to reach MinIO through the proxy", func() (bool, string) {
		n, err := store.Count(t.Context(), key)
		return err == nil && n > 0, fmt.Sprintf("%d log objects, err %v", n, err)
	})

	proxy.stall()
	fmt.Fprintln(l, "step 2") // the next periodic upload hangs
	closed := make(chan error, 1)
	go func() { closed <- l.Close(context.Background()) }()
	select {
	case err = <-closed:
	case <-time.After(2 * time.Minute): // the failure's bound, far above the 0.5 s timeout
		t.Fatal("Close has not returned 2 minutes after the object store stopped answering: a hung upload holds the build")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer within "+timeout.String()) ||
		!strings.Contains(err.Error(), key) {
		t.Errorf("Close() = %v; want the log's key, that the object store did not answer within %s, and context.DeadlineExceeded", err, timeout)
	}
}
