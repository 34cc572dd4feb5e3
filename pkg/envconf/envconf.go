// Package envconf reads a service's configuration from environment
// variables and collects every problem, so that a misconfigured service
// reports all of them at once instead of one per restart.
package envconf

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Reader reads typed values through getenv and remembers the errors.
type Reader struct {
	get  func(string) string
	errs []error
}

// New returns a reader over getenv (os.Getenv in main, a map in tests).
func New(getenv func(string) string) *Reader { return &Reader{get: getenv} }

// String returns the value of key, or def when it is unset.
func (r *Reader) String(key, def string) string {
	if v := r.get(key); v != "" {
		return v
	}
	return def
}

// Required returns the value of key and records an error when it is unset.
func (r *Reader) Required(key, what string) string {
	v := r.get(key)
	if v == "" {
		r.errs = append(r.errs, fmt.Errorf("%s is required (%s)", key, what))
	}
	return v
}

// URL returns key parsed as an absolute URL with one of the schemes.
func (r *Reader) URL(key, def string, schemes ...string) string {
	v := r.String(key, def)
	if v == "" {
		return v
	}
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		r.errs = append(r.errs, fmt.Errorf("%s: not an absolute URL", key))
		return v
	}
	for _, s := range schemes {
		if u.Scheme == s {
			return v
		}
	}
	r.errs = append(r.errs, fmt.Errorf("%s: scheme %q, want one of %v", key, u.Scheme, schemes))
	return v
}

// Int returns key as an integer within [lo, hi], or def when unset.
func (r *Reader) Int(key string, def, lo, hi int) int {
	v := r.get(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want an integer from %d to %d", key, v, lo, hi))
		return def
	}
	return n
}

// Duration returns key as a Go duration (5s, 1m), or def when unset.
func (r *Reader) Duration(key string, def time.Duration) time.Duration {
	v := r.get(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want a non-negative duration such as 5s", key, v))
		return def
	}
	return d
}

// Bool returns key as a boolean, or def when unset.
func (r *Reader) Bool(key string, def bool) bool {
	v := r.get(key)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: want true or false", key, v))
		return def
	}
	return b
}

// OneOf returns key when it is one of the allowed values.
func (r *Reader) OneOf(key, def string, allowed ...string) string {
	v := r.String(key, def)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.errs = append(r.errs, fmt.Errorf("%s=%q: want one of %v", key, v, allowed))
	return v
}

// Err returns every recorded problem joined, or nil.
func (r *Reader) Err() error { return errors.Join(r.errs...) }

// Failf records a problem found by the caller's own validation.
func (r *Reader) Failf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Errorf(format, args...))
}
