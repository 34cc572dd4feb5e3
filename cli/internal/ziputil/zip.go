// Package ziputil is the CLI's name for the deterministic zip of a function
// directory, which lives in pkg/archive so that the Terraform provider
// computes the same digest for the same tree.
package ziputil

import "github.com/kube5s/sless/pkg/archive"

// Archive is a packed directory.
type Archive = archive.Packed

// Pack zips dir (see archive.Pack).
func Pack(dir string, exclude []string) (*Archive, error) { return archive.Pack(dir, exclude) }
