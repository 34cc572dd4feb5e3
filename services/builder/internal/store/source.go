package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"

	"github.com/kube5s/sless/pkg/archive"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/services/builder/internal/build"
)

// Sources reads source archives (an *objstore.Store does).
type Sources interface {
	Get(ctx context.Context, key string) (io.ReadCloser, int64, error)
}

// FetchSource fetches the source archive at key, of at most max bytes, and
// refuses it unless it has the requested SHA-256 (want). A missing or
// mismatched archive is build.ReasonSourceUnavailable, one over the limit
// archive.ReasonTooLarge.
func FetchSource(ctx context.Context, objs Sources, key, want string, max int64) ([]byte, error) {
	data, err := fetchArchive(ctx, objs, key, max)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != want {
		return nil, build.Fail(build.ReasonSourceUnavailable, "the archive at %s has SHA-256 %s, not the requested %s; upload it again", key, got, want)
	}
	return data, nil
}

// fetchArchive reads a source archive of at most max bytes.
func fetchArchive(ctx context.Context, objs Sources, key string, max int64) ([]byte, error) {
	rc, size, err := objs.Get(ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, build.Fail(build.ReasonSourceUnavailable, "source archive %s is not in the object store; upload it again", key)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if size > max {
		return nil, build.Fail(archive.ReasonTooLarge, "the archive is %d bytes, the limit is %d", size, max)
	}
	data, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, build.Fail(archive.ReasonTooLarge, "the archive is over the limit of %d bytes", max)
	}
	return data, nil
}
