// Package crds embeds the generated CustomResourceDefinitions of sless so that
// the operator, the tests and the local profile install exactly what
// `make generate` wrote.
package crds

import (
	"embed"
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed *.yaml
var files embed.FS

// Dir is the path of the YAML files relative to the module root.
const Dir = "apis/sless/crds"

// All returns the CRDs, decoded.
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			return nil, fmt.Errorf("decode CRD %s: %w", n, err)
		}
		out = append(out, &crd)
	}
	return out, nil
}
