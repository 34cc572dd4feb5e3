// Command bridge makes this machine's servers that listen on loopback only
// (PostgreSQL, RabbitMQ, MinIO, the registry, an OTLP collector) reachable
// from the one-node cluster's pods: for each LISTEN=TARGET argument it
// accepts TCP connections on LISTEN (the cluster bridge's address) and
// copies each to and from TARGET. hack/cluster.sh bridge starts it and
// down stops it; it runs until SIGTERM or SIGINT.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bridge:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: bridge LISTEN=TARGET [LISTEN=TARGET]")
	}
	for _, a := range args {
		listen, target, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q is not LISTEN=TARGET", a)
		}
		l, err := net.Listen("tcp", listen)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", listen, err)
		}
		go func() { <-ctx.Done(); _ = l.Close() }()
		go serve(l, target)
		fmt.Fprintf(os.Stderr, "bridge: %s -> %s\n", listen, target)
	}
	<-ctx.Done()
	return nil
}

// serve copies every connection accepted on l to and from target.
func serve(l net.Listener, target string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				return
			}
			defer u.Close()
			go func() {
				_, _ = io.Copy(u, c)
				_ = u.(*net.TCPConn).CloseWrite()
			}()
			_, _ = io.Copy(c, u)
		}()
	}
}
