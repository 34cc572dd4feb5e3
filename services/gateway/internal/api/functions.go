package api

import (
	"context"
	"fmt"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
)

var functionKind = specKind[Function, FunctionSpec, *slessv1.Function, *slessv1.FunctionList]{
	kind: kind[Function, *slessv1.Function, *slessv1.FunctionList]{
		name: "function", plural: "functions",
		newObj: func() *slessv1.Function { return &slessv1.Function{} }, newList: func() *slessv1.FunctionList { return &slessv1.FunctionList{} },
		items: func(l *slessv1.FunctionList) []*slessv1.Function {
			out := make([]*slessv1.Function, len(l.Items))
			for i := range l.Items {
				out[i] = &l.Items[i]
			}
			return out
		},
		toREST: func(f *slessv1.Function) Function { return functionREST(f) },
	},
	apply: func(f *slessv1.Function, spec *FunctionSpec) { applyFunctionSpec(&f.Spec, spec) },
	// The split's shape; which versions exist is PUT .../traffic's check.
	check: func(ctx context.Context, spec *FunctionSpec) error {
		if err := checkSchedules(ctx, spec.ScalingSchedules); err != nil {
			return err
		}
		return checkTraffic(ctx, spec.Traffic, nil)
	},
}

// checkSchedules validates what the schema cannot: each floor's cron
// expression and time zone, with the cron triggers' parser and rules
// (pkg/cronsched), so a bad schedule is refused here rather than ignored
// later.
func checkSchedules(ctx context.Context, schedules []ScalingSchedule) error {
	for i, e := range schedules {
		if _, err := cronsched.Parse(e.Cron, e.TimeZone); err != nil {
			loc := fmt.Sprintf("body.scaling_schedules[%d]", i) // the error names the schedule or the time zone
			return withID(ctx, problem(422, "", "scaling_schedules[%d]: %v", i, err).field(loc, err.Error()))
		}
	}
	return nil
}

func (s *Server) registerFunctions() {
	register(s, s.route("list-functions"),
		func(ctx context.Context, in *struct {
			TenantPath
			Page
		}) (*ListOut[Function], error) {
			return functionKind.list(ctx, s, in.Tenant, in.Page)
		})
	register(s, s.route("create-function"),
		func(ctx context.Context, in *struct {
			TenantPath
			Body FunctionInput
		}) (*One[Function], error) {
			return functionKind.post(ctx, s, in.Tenant, in.Body.Name, &in.Body.FunctionSpec)
		})
	register(s, s.route("get-function"), s.getFunction)
	register(s, s.route("replace-function"),
		func(ctx context.Context, in *struct {
			NamedPath
			Body FunctionReplacement
		}) (*One[Function], error) {
			return functionKind.put(ctx, s, &in.NamedPath, &in.Body)
		})
	register(s, s.route("patch-function"),
		func(ctx context.Context, in *PatchIn) (*One[Function], error) { return functionKind.patch(ctx, s, in) })
	register(s, s.route("delete-function"),
		func(ctx context.Context, in *NamedPath) (*Accepted, error) { return functionKind.delete(ctx, s, in) })
}
