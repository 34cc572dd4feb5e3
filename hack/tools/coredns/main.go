// Command coredns is the cluster DNS of hack/cluster.sh: CoreDNS built from
// its Go module with only the plugins the cluster's Corefile names (CoreDNS
// selects its plugins at compile time; its own main links all of them, and
// the cloud DNS providers' SDKs among them doubled the build's time). A
// plugin added to the Corefile must be added here, or CoreDNS refuses the
// Corefile at start ("unknown directive").
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
