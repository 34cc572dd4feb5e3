// Package funclog names the file that receives a function's output in the
// local profile: the operator's local driver writes it, the gateway's logs
// endpoint reads it. Namespace and function are Kubernetes names (no "/"
// and no "_"), so each pair has a file of its own.
package funclog

import "path/filepath"

// Path is the log file of function in namespace, under dir.
func Path(dir, namespace, function string) string {
	return filepath.Join(dir, namespace+"_"+function+".log")
}
