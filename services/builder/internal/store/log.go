package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// LogObjects writes build logs (an *objstore.Store does).
type LogObjects interface {
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error
}

// LogUploadTimeout bounds one upload of a build log. An object store that
// accepts the request and never answers fails that upload instead of
// holding the build: a periodic upload is tried again at the next tick,
// and the final one is reported (the build's result does not depend on it).
const LogUploadTimeout = 30 * time.Second

// Log collects a build's output and uploads the whole log every interval
// while the build runs, so that a reader can follow it, and once more at
// the end. Each upload is bounded by its timeout.
type Log struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	dirty   bool
	store   LogObjects
	key     string
	max     int
	timeout time.Duration
	cancel  context.CancelFunc // stops the periodic upload, and one in flight
	done    chan struct{}
	cutoff  bool
}

// NewLog starts the periodic upload of key, until Close or the end of ctx
// (the build's); each upload gives up after timeout.
func NewLog(ctx context.Context, store LogObjects, key string, interval, timeout time.Duration, maxBytes int) *Log {
	ctx, cancel := context.WithCancel(ctx)
	l := &Log{store: store, key: key, max: maxBytes, timeout: timeout, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = l.flush(ctx) // the next tick, or Close, uploads it again
			}
		}
	}()
	return l
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len()+len(p) > l.max {
		if !l.cutoff {
			l.buf.WriteString("\n[build log truncated]\n")
			l.cutoff = true
		}
		return len(p), nil
	}
	l.dirty = true
	return l.buf.Write(p)
}

func (l *Log) flush(ctx context.Context) error {
	l.mu.Lock()
	if !l.dirty {
		l.mu.Unlock()
		return nil
	}
	data := append([]byte(nil), l.buf.Bytes()...)
	l.dirty = false
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	if err := l.store.Put(ctx, l.key, bytes.NewReader(data), int64(len(data)), "text/plain; charset=utf-8"); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("upload build log %s: the object store did not answer within %s: %w", l.key, l.timeout, err)
		}
		return fmt.Errorf("upload build log %s: %w", l.key, err)
	}
	return nil
}

// Close stops the periodic upload (cancelling one in flight) and uploads
// the final log, within the timeout.
func (l *Log) Close(ctx context.Context) error {
	l.cancel()
	<-l.done
	l.mu.Lock()
	l.dirty = true
	l.mu.Unlock()
	return l.flush(ctx)
}
