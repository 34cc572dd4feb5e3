package review

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/kube5s/sless/pkg/archive"
)

// None is the default reviewer: nothing is reviewed, nothing recorded.
type None struct{}

// Name implements Reviewer.
func (None) Name() string { return "none" }

// Review implements Reviewer.
func (None) Review(context.Context, *Request) (Verdict, error) {
	return Verdict{Decision: Allow, Reasons: []string{}}, nil
}

// Store keeps one verdict per tenant and source digest.
type Store interface {
	// SourceReview returns the stored verdict; found is false without one.
	SourceReview(ctx context.Context, tenant, sha string) (r SourceReview, found bool, err error)
	// SaveSourceReview stores r unless a verdict other than Unavailable is
	// stored already (a real review is final; an unavailable one is not).
	SaveSourceReview(ctx context.Context, tenant, function, sha string, r SourceReview) error
}

// Config is the policy of a Gate.
type Config struct {
	// FailOpen lets an upload through, with an Unavailable record, when the
	// reviewer gives no usable answer; otherwise the upload is refused for
	// now (UnavailableError).
	FailOpen bool
	// Timeout bounds one review, answer included.
	Timeout time.Duration
	// TextBudget is the most bytes of file text a reviewer is sent.
	TextBudget int
	// Limits are the archive limits the upload was checked against.
	Limits archive.Limits
}

// DeniedError: the reviewer denied the upload.
type DeniedError struct{ Review SourceReview }

func (e *DeniedError) Error() string { return "the source review denied the upload" }

// UnavailableError: no usable answer, and the policy is fail closed.
type UnavailableError struct {
	Review SourceReview // Verdict Unavailable, with the reason shown
	Err    error
}

func (e *UnavailableError) Error() string { return "source review unavailable: " + e.Err.Error() }
func (e *UnavailableError) Unwrap() error { return e.Err }

// Gate applies the review policy to uploads.
type Gate struct {
	cfg      Config
	reviewer Reviewer
	store    Store
	log      *slog.Logger
	flight   singleflight.Group
	reviews  *prometheus.CounterVec
	now      func() time.Time
}

// NewGate returns the gate of reviewer; reg may be nil.
func NewGate(cfg Config, reviewer Reviewer, store Store, log *slog.Logger, reg *prometheus.Registry) *Gate {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	g := &Gate{cfg: cfg, reviewer: reviewer, store: store, log: log, now: time.Now,
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sless_gateway_source_reviews_total",
			Help: "Source reviews at upload by verdict (allow, deny, warn, unavailable) and whether the stored verdict of the digest was reused."},
			[]string{"verdict", "stored"})}
	if reg != nil {
		reg.MustRegister(g.reviews)
	}
	return g
}

// Enabled says whether uploads are reviewed at all.
func (g *Gate) Enabled() bool {
	if g == nil {
		return false
	}
	_, none := g.reviewer.(None)
	return !none
}

type outcome struct {
	review SourceReview
	err    error // the reviewer's, when review.Verdict is Unavailable
}

// Check reviews an upload, once per tenant and digest: a stored verdict
// is reused, concurrent uploads of the same digest share one review. It
// returns the verdict to show (nil when reviews are off), *DeniedError for
// a deny and *UnavailableError when the reviewer gave no usable answer and
// the policy is fail closed. An upload let through by fail open gets a
// review with Verdict Unavailable, recorded and logged.
func (g *Gate) Check(ctx context.Context, m Meta, zipped []byte) (*SourceReview, error) {
	if !g.Enabled() {
		return nil, nil
	}
	log := g.log.With("tenant", m.Tenant, "function", m.Function, "sha256", m.SourceSHA256)
	stored, found, err := g.store.SourceReview(ctx, m.Tenant, m.SourceSHA256)
	if err != nil {
		log.Warn("stored source review unreadable; reviewing again", "err", err)
	}
	if found && stored.Verdict != Unavailable {
		g.reviews.WithLabelValues(string(stored.Verdict), "true").Inc()
		return decide(stored)
	}
	v, _, _ := g.flight.Do(m.Tenant+"/"+m.SourceSHA256, func() (any, error) {
		// Detached from the caller: the review is shared by every upload of
		// the digest in flight, and its verdict is worth keeping.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.Timeout)
		defer cancel()
		return g.review(rctx, m, zipped, log), nil
	})
	o := v.(outcome)
	g.reviews.WithLabelValues(string(o.review.Verdict), "false").Inc()
	if o.err == nil {
		return decide(o.review)
	}
	if !g.cfg.FailOpen {
		log.Warn("source review unavailable; upload refused (fail closed)", "reviewer", o.review.Reviewer, "err", o.err)
		return nil, &UnavailableError{Review: o.review, Err: o.err}
	}
	log.Warn("source review unavailable; upload let through (fail open)", "reviewer", o.review.Reviewer, "err", o.err)
	if err := g.store.SaveSourceReview(ctx, m.Tenant, m.Function, m.SourceSHA256, o.review); err != nil {
		log.Error("source review not recorded", "err", err)
	}
	return &o.review, nil
}

// review asks the reviewer and stores a real verdict.
func (g *Gate) review(ctx context.Context, m Meta, zipped []byte, log *slog.Logger) outcome {
	start := g.now()
	rv := SourceReview{Reviewer: g.reviewer.Name(), ReviewedAt: start.UTC()}
	req, err := NewRequest(m, zipped, g.cfg.Limits, g.cfg.TextBudget)
	var v Verdict
	if err == nil {
		v, err = g.reviewer.Review(ctx, req)
	}
	rv.LatencyMs = g.now().Sub(start).Milliseconds()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (after %s): %w", context.DeadlineExceeded, g.cfg.Timeout, err)
		}
		rv.Verdict, rv.Reasons = Unavailable, []string{unavailableReason(err, g.cfg.Timeout)}
		return outcome{review: rv, err: err}
	}
	rv.Verdict, rv.Reasons = v.Decision, v.Reasons
	if err := g.store.SaveSourceReview(ctx, m.Tenant, m.Function, m.SourceSHA256, rv); err != nil {
		log.Error("source review not recorded", "err", err)
	}
	return outcome{review: rv}
}

// decide maps a verdict to the upload's fate.
func decide(r SourceReview) (*SourceReview, error) {
	if r.Verdict == Deny {
		return nil, &DeniedError{Review: r}
	}
	return &r, nil
}

// unavailableReason is what the tenant is told when no verdict came: the
// kind of failure, never the reviewer's address or error text.
func unavailableReason(err error, timeout time.Duration) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("the reviewer did not answer within %s", timeout)
	case errors.Is(err, ErrRefused):
		return "the reviewer refused to review the source"
	case errors.Is(err, ErrMalformed):
		return "the reviewer's answer was not a verdict"
	}
	return "the reviewer could not be reached"
}
