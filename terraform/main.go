// Command terraform-provider-sless is the sless Terraform provider. Terraform
// or OpenTofu starts it; -debug runs it for a debugger (TF_REATTACH_PROVIDERS).
package main

import (
	"context"
	"flag"
	"log"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/kube5s/sless/terraform/internal/provider"
)

// version is set at link time (-X main.version=...).
var version = "dev"

func main() {
	debug := flag.Bool("debug", false, "run for a debugger: print TF_REATTACH_PROVIDERS and serve until stopped")
	flag.Parse()
	err := providerserver.Serve(context.Background(), provider.New(version, os.Getenv), providerserver.ServeOpts{
		Address: provider.Address,
		Debug:   *debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
