package api

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

var jobKind = kind[Job, *slessv1.FunctionJob, *slessv1.FunctionJobList]{
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
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			j := &slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: in.Body.Name, Namespace: ns}, Spec: jobSpecCR(&in.Body.JobSpec)}
			return jobKind.create(ctx, s, in.Tenant, j)
		})
	register(s, s.route("get-job"),
		func(ctx context.Context, in *NamedPath) (*One[Job], error) { return jobKind.get(ctx, s, in) })
	register(s, s.route("replace-job"),
		func(ctx context.Context, in *struct {
			NamedPath
			Body JobSpec
		}) (*One[Job], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			var j slessv1.FunctionJob
			err = s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &j)
			if client.IgnoreNotFound(err) != nil {
				return nil, fromKube(ctx, "job "+in.Name, err)
			}
			if err != nil {
				j = slessv1.FunctionJob{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: ns}, Spec: jobSpecCR(&in.Body)}
				return jobKind.create(ctx, s, in.Tenant, &j)
			}
			j.Spec = jobSpecCR(&in.Body)
			if err := s.Kube.Update(ctx, &j); err != nil {
				return nil, fromKube(ctx, "job "+in.Name, err)
			}
			return &One[Job]{Status: 200, Body: jobREST(&j)}, nil
		})
	register(s, s.route("patch-job"),
		func(ctx context.Context, in *PatchIn) (*One[Job], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			var j slessv1.FunctionJob
			if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &j); err != nil {
				return nil, fromKube(ctx, "job "+in.Name, err)
			}
			var spec JobSpec
			if err := mergePatch(ctx, jobREST(&j), in, &spec); err != nil {
				return nil, err
			}
			j.Spec = jobSpecCR(&spec)
			if err := s.Kube.Update(ctx, &j); err != nil {
				return nil, fromKube(ctx, "job "+in.Name, err)
			}
			return &One[Job]{Status: 200, Body: jobREST(&j)}, nil
		})
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
