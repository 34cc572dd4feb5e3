package objstore

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/kube5s/sless/pkg/testenv"
)

func TestStoreAgainstMinIO(t *testing.T) {
	s3 := testenv.S3(t)
	st, err := New(Config{Endpoint: s3.Endpoint, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Bucket: s3.Bucket})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(ctx); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("sless"), 10000)
	key := SourceKey("acme", "hello", "abc")
	if err := st.Put(ctx, key, bytes.NewReader(body), int64(len(body)), "application/zip"); err != nil {
		t.Fatal(err)
	}
	rc, size, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if size != int64(len(body)) || !bytes.Equal(got, body) {
		t.Fatalf("got %d bytes back (size %d), want the %d stored", len(got), size, len(body))
	}
	if _, _, err := st.Get(ctx, SourceKey("acme", "hello", "missing")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing object: err = %v, want ErrNotFound", err)
	}
	_ = st.Put(ctx, SourceKey("acme", "other", "x"), bytes.NewReader(nil), 0, "")
	n, err := st.DeletePrefix(ctx, SourcePrefix("acme", "hello"))
	if err != nil || n != 1 {
		t.Fatalf("DeletePrefix = %d, %v; want 1 object removed", n, err)
	}
	if ok, _ := st.Exists(ctx, key); ok {
		t.Fatal("object still exists after DeletePrefix")
	}
	if ok, _ := st.Exists(ctx, SourceKey("acme", "other", "x")); !ok {
		t.Fatal("DeletePrefix removed another function's object")
	}
}
