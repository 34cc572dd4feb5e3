// Package registry deletes the images the platform built, by digest, when
// the last FunctionVersion that ran one is gone.
package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Images deletes manifests from the platform's registry.
type Images struct {
	// Prefix is the repository prefix builds push to (SLESS_REGISTRY); an
	// image outside it is never deleted.
	Prefix string
	// Insecure talks plain HTTP (SLESS_REGISTRY_INSECURE).
	Insecure bool
	// Keychain gives the credentials; nil: $DOCKER_CONFIG/config.json, as
	// the builder's push.
	Keychain authn.Keychain
}

// Delete removes image (repository@sha256:...) from the registry. An image
// already gone is not an error.
func (i *Images) Delete(ctx context.Context, image string) error {
	prefix := strings.TrimSuffix(i.Prefix, "/") + "/"
	if i.Prefix == "" || !strings.HasPrefix(image, prefix) {
		return fmt.Errorf("image %s is not in the platform registry %s", image, i.Prefix)
	}
	var opts []name.Option
	if i.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.NewDigest(image, opts...)
	if err != nil {
		return fmt.Errorf("image %q: %w", image, err)
	}
	kc := i.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	err = remote.Delete(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc))
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete image %s: %w", image, err)
	}
	return nil
}
