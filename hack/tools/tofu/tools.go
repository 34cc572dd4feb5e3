//go:build tools

// Package tofu pins the OpenTofu build that the Terraform provider's
// acceptance tests drive (hack/deps.sh tofu).
package tofu

import _ "github.com/opentofu/opentofu/cmd/tofu"
