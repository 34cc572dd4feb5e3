package api

import (
	"context"
	"errors"
	"strings"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/services/gateway/internal/review"
)

// reviewRetryAfter is the Retry-After of an upload refused because the
// reviewer is unavailable and the policy is fail closed.
const reviewRetryAfter = 30

// reviewSource puts an upload (archive checks passed, not stored yet)
// before the source review: the verdict to show, or the problem that
// refuses it, a 422 review-denied with the reviewer's reasons or (fail
// closed) a 503 review-unavailable with Retry-After.
func (s *Server) reviewSource(ctx context.Context, tenant string, fn *slessv1.Function, body []byte, sha string) (*review.SourceReview, error) {
	rv, err := s.Review.Check(ctx, review.Meta{Tenant: tenant, Function: fn.Name, Runtime: string(fn.Spec.Runtime),
		Entrypoint: fn.Spec.Entrypoint, SourceSHA256: sha}, body)
	var denied *review.DeniedError
	var unavailable *review.UnavailableError
	switch {
	case errors.As(err, &denied):
		// The reasons are the problem's errors, one each, as a client
		// shows the errors of a refused request.
		p := withID(ctx, problem(422, "review-denied", "the source review (%s) denied this source", denied.Review.Reviewer))
		for _, r := range denied.Review.Reasons {
			p.Errors = append(p.Errors, &ProblemField{Message: r})
		}
		return nil, p
	case errors.As(err, &unavailable):
		return nil, withID(ctx, problem(503, "review-unavailable", "the source review is unavailable (%s) and uploads wait for it; try again later",
			strings.Join(unavailable.Review.Reasons, "; "))).retry(reviewRetryAfter)
	case err != nil:
		return nil, s.internal(ctx, 500, err, "the source could not be reviewed")
	}
	return rv, nil
}
