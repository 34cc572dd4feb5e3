package build

import (
	"bytes"
	"context"
	"sync"
	"time"
)

// LogStore writes build logs.
type LogStore interface {
	Put(ctx context.Context, key string, data []byte) error
}

// Log collects a build's output and uploads the whole log every interval
// while the build runs, so that a reader can follow it, and once more at
// the end.
type Log struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	dirty  bool
	store  LogStore
	key    string
	max    int
	stop   chan struct{}
	done   chan struct{}
	cutoff bool
}

// NewLog starts the periodic upload of key.
func NewLog(store LogStore, key string, interval time.Duration, maxBytes int) *Log {
	l := &Log{store: store, key: key, max: maxBytes, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				l.flush(context.Background())
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
	return l.store.Put(ctx, l.key, data)
}

// Close stops the periodic upload and uploads the final log.
func (l *Log) Close(ctx context.Context) error {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	l.dirty = true
	l.mu.Unlock()
	return l.flush(ctx)
}
