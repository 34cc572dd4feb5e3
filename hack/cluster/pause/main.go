// Command pause is the sandbox (pause) container of the local cluster's pods:
// it holds the pod's namespaces open and exits on SIGINT or SIGTERM. It is
// built from this repository and assembled into registry.k8s.io/pause by
// hack/cluster.sh, as no image can be pulled here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of the pod it also reaps the zombies its children leave.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGCHLD)
	go func() {
		for {
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil {
				signal.Reset(syscall.SIGCHLD)
				select {}
			}
		}
	}()
	<-sig
}
