// Package objstore owns sless's layout in the S3-compatible object store
// (source archives, build logs, large payloads) and the minio-go client that
// reads and writes it.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/kube5s/sless/pkg/envconf"
)

// ErrNotFound is returned when an object does not exist.
var ErrNotFound = errors.New("object not found")

// Config locates the bucket.
type Config struct {
	Endpoint  string // host:port
	AccessKey string
	SecretKey string
	Bucket    string
	Region    string
	Secure    bool
	// Transport carries the requests; nil is minio-go's default. Tests
	// count the bytes a reader fetched with it.
	Transport http.RoundTripper
}

// Store reads and writes objects in one bucket.
type Store struct {
	mc     *minio.Client
	bucket string
}

// New returns a store; it does not contact the server.
func New(cfg Config) (*Store, error) {
	mc, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:    cfg.Secure,
		Region:    cfg.Region,
		Transport: cfg.Transport,
	})
	if err != nil {
		return nil, fmt.Errorf("object store client for %s: %w", cfg.Endpoint, err)
	}
	return &Store{mc: mc, bucket: cfg.Bucket}, nil
}

// EnsureBucket creates the bucket when it is missing.
func (s *Store) EnsureBucket(ctx context.Context) error {
	ok, err := s.mc.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("check bucket %s: %w", s.bucket, err)
	}
	if ok {
		return nil
	}
	if err := s.mc.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{}); err != nil {
		var er minio.ErrorResponse
		if errors.As(err, &er) && er.Code == "BucketAlreadyOwnedByYou" {
			return nil
		}
		return fmt.Errorf("create bucket %s: %w", s.bucket, err)
	}
	return nil
}

// Check reports whether the bucket is reachable; it backs /readyz.
func (s *Store) Check(ctx context.Context) error {
	ok, err := s.mc.BucketExists(ctx, s.bucket)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("bucket %s does not exist", s.bucket)
	}
	return nil
}

// Put stores size bytes from r under key.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	if _, err := s.mc.PutObject(ctx, s.bucket, key, r, size, minio.PutObjectOptions{ContentType: contentType}); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Get opens the object at key; the caller closes it.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	o, err := s.mc.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, 0, fmt.Errorf("get %s: %w", key, err)
	}
	st, err := o.Stat()
	if err != nil {
		_ = o.Close()
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, 0, fmt.Errorf("get %s: %w", key, ErrNotFound)
		}
		return nil, 0, fmt.Errorf("get %s: %w", key, err)
	}
	return o, st.Size, nil
}

// GetFrom opens the object at key from byte offset on, with a ranged read,
// for a reader that follows a growing object (a build log) and must not
// fetch what it already has. At or past the end it returns an empty
// reader; a missing object is ErrNotFound.
func (s *Store) GetFrom(ctx context.Context, key string, offset int64) (io.ReadCloser, error) {
	if offset <= 0 {
		rc, _, err := s.Get(ctx, key)
		return rc, err
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(offset, 0); err != nil { // bytes=offset-
		return nil, fmt.Errorf("get %s from %d: %w", key, offset, err)
	}
	o, err := s.mc.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, fmt.Errorf("get %s from %d: %w", key, offset, err)
	}
	// Stat sends the ranged GET itself; its answer says whether there is
	// anything new.
	if _, err := o.Stat(); err != nil {
		_ = o.Close()
		switch minio.ToErrorResponse(err).Code {
		case "InvalidRange":
			return io.NopCloser(strings.NewReader("")), nil
		case "NoSuchKey":
			return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("get %s from %d: %w", key, offset, err)
	}
	return o, nil
}

// Exists reports whether key exists.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	_, err := s.mc.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err == nil {
		return true, nil
	}
	if minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return false, nil
	}
	return false, fmt.Errorf("stat %s: %w", key, err)
}

// DeletePrefix removes every object under prefix and returns how many.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) (int, error) {
	n := 0
	for o := range s.mc.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return n, fmt.Errorf("list %s: %w", prefix, o.Err)
		}
		if err := s.mc.RemoveObject(ctx, s.bucket, o.Key, minio.RemoveObjectOptions{}); err != nil {
			return n, fmt.Errorf("remove %s: %w", o.Key, err)
		}
		n++
	}
	return n, nil
}

// Delete removes the object at key; a key with no object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.mc.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("remove %s: %w", key, err)
	}
	return nil
}

// SourceKey is where a function's source archive with that digest lives.
func SourceKey(tenant, function, sha256 string) string {
	return "sources/" + tenant + "/" + function + "/" + sha256 + ".zip"
}

// SourcePrefix holds every source archive of a function (or of a tenant
// when function is empty).
func SourcePrefix(tenant, function string) string {
	if function == "" {
		return "sources/" + tenant + "/"
	}
	return "sources/" + tenant + "/" + function + "/"
}

// BuildLogKey is where the log of one build lives.
func BuildLogKey(tenant, function, buildID string) string {
	return BuildPrefix(tenant, function) + buildID + ".log"
}

// BuildPrefix holds every build log of a function.
func BuildPrefix(tenant, function string) string {
	return "builds/" + tenant + "/" + function + "/"
}

// PayloadKey is where a large invocation result lives.
func PayloadKey(tenant, invocationID string) string {
	return "payloads/" + tenant + "/" + invocationID
}

// RequestKey is where the request of a large dead letter lives.
func RequestKey(tenant, invocationID string) string {
	return "payloads/" + tenant + "/" + invocationID + ".request.json"
}

// KeptRequestKey is where the request of an invocation that did not
// succeed is kept for a replay (msg.KeptRequest as JSON).
func KeptRequestKey(tenant, invocationID string) string {
	return "payloads/" + tenant + "/" + invocationID + ".kept.json"
}

// ReadConfig reads SLESS_S3_ENDPOINT, SLESS_S3_ACCESS_KEY,
// SLESS_S3_SECRET_KEY, SLESS_S3_BUCKET, SLESS_S3_REGION and SLESS_S3_SECURE.
func ReadConfig(r *envconf.Reader) Config {
	return Config{
		Endpoint:  r.Required("SLESS_S3_ENDPOINT", "host:port of the S3 API"),
		AccessKey: r.Required("SLESS_S3_ACCESS_KEY", "S3 access key"),
		SecretKey: r.Required("SLESS_S3_SECRET_KEY", "S3 secret key"),
		Bucket:    r.String("SLESS_S3_BUCKET", "sless"),
		Region:    r.String("SLESS_S3_REGION", ""),
		Secure:    r.Bool("SLESS_S3_SECURE", false),
	}
}

// TenantPrefixes are every prefix under which a tenant's objects live.
func TenantPrefixes(tenant string) []string {
	return []string{"sources/" + tenant + "/", "builds/" + tenant + "/", "payloads/" + tenant + "/"}
}

// FunctionPrefixes are every prefix under which a function's objects live.
func FunctionPrefixes(tenant, function string) []string {
	return []string{SourcePrefix(tenant, function), BuildPrefix(tenant, function)}
}

// Count returns how many objects are under prefix.
func (s *Store) Count(ctx context.Context, prefix string) (int, error) {
	n := 0
	for o := range s.mc.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			if minio.ToErrorResponse(o.Err).Code == "NoSuchBucket" {
				return 0, nil
			}
			return n, o.Err
		}
		n++
	}
	return n, nil
}
