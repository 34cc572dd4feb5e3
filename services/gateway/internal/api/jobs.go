package api

import (
	"context"

	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

var jobKind = specKind[Job, JobSpec, *slessv1.FunctionJob, *slessv1.FunctionJobList]{
	kind: kind[Job, *slessv1.FunctionJob, *slessv1.FunctionJobList]{
		name: "job", plural: "jobs",
		newObj: func() *slessv1.FunctionJob { return &slessv1.FunctionJob{} }, newList: func() *slessv1.FunctionJobList { return &slessv1.FunctionJobList{} },
		items: func(l *slessv1.FunctionJobList) []*slessv1.FunctionJob {
			out := make([]*slessv1.FunctionJob, len(l.Items))
			for i := range l.Items {
				out[i] = &l.Items[i]
			}
			return out
		},
		toREST: func(j *slessv1.FunctionJob) Job { return jobREST(j) },
	},
	apply: func(j *slessv1.FunctionJob, spec *JobSpec) { j.Spec = jobSpecCR(spec) },
}

// RunOut answers a new run.
type RunOut struct {
	Body struct {
		RunID int64 `json:"run_id"`
	}
}

func (s *Server) registerJobs() {
	register(s, s.route("list-jobs"),
		func(ctx context.Context, in *struct {
			TenantPath
			Page
		}) (*ListOut[Job], error) {
			return jobKind.list(ctx, s, in.Tenant, in.Page)
		})
	register(s, s.route("create-job"),
		func(ctx context.Context, in *struct {
			TenantPath
			Body JobInput
		}) (*One[Job], error) {
			return jobKind.post(ctx, s, in.Tenant, in.Body.Name, &in.Body.JobSpec)
		})
	register(s, s.route("get-job"),
		func(ctx context.Context, in *NamedPath) (*One[Job], error) { return jobKind.get(ctx, s, in) })
	register(s, s.route("replace-job"),
		func(ctx context.Context, in *struct {
			NamedPath
			Body JobReplacement
		}) (*One[Job], error) {
			return jobKind.put(ctx, s, &in.NamedPath, &in.Body)
		})
	register(s, s.route("patch-job"),
		func(ctx context.Context, in *PatchIn) (*One[Job], error) { return jobKind.patch(ctx, s, in) })
	register(s, s.route("delete-job"),
		func(ctx context.Context, in *NamedPath) (*Accepted, error) { return jobKind.delete(ctx, s, in) })
	register(s, s.route("run-job"),
		func(ctx context.Context, in *NamedPath) (*RunOut, error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			out := &RunOut{}
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var j slessv1.FunctionJob
				if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &j); err != nil {
					return err
				}
				j.Spec.RunID++
				out.Body.RunID = j.Spec.RunID
				return s.Kube.Update(ctx, &j)
			})
			if err != nil {
				return nil, fromKube(ctx, "job "+in.Name, err)
			}
			return out, nil
		})
}
