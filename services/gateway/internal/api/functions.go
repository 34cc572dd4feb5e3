package api

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

var functionKind = kind[Function, *slessv1.Function, *slessv1.FunctionList]{
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
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			f := &slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: in.Body.Name, Namespace: ns}}
			applyFunctionSpec(&f.Spec, &in.Body.FunctionSpec)
			return functionKind.create(ctx, s, in.Tenant, f)
		})
	register(s, s.route("get-function"),
		func(ctx context.Context, in *NamedPath) (*One[Function], error) { return functionKind.get(ctx, s, in) })
	register(s, s.route("replace-function"),
		func(ctx context.Context, in *struct {
			NamedPath
			Body FunctionSpec
		}) (*One[Function], error) {
			if missing := in.Body.missingForPut(); len(missing) > 0 {
				p := withID(ctx, problem(422, "", "PUT replaces the whole function and needs %s; use PATCH to change some fields", strings.Join(missing, ", ")))
				for _, m := range missing {
					p.field("body."+m, "required")
				}
				return nil, p
			}
			return s.putFunction(ctx, &in.NamedPath, &in.Body)
		})
	register(s, s.route("patch-function"),
		func(ctx context.Context, in *PatchIn) (*One[Function], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			var f slessv1.Function
			if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &f); err != nil {
				return nil, fromKube(ctx, "function "+in.Name, err)
			}
			var spec FunctionSpec
			if err := mergePatch(ctx, functionREST(&f), in, &spec); err != nil {
				return nil, err
			}
			applyFunctionSpec(&f.Spec, &spec)
			if err := s.Kube.Update(ctx, &f); err != nil {
				return nil, fromKube(ctx, "function "+in.Name, err)
			}
			return &One[Function]{Status: 200, Body: functionREST(&f)}, nil
		})
	register(s, s.route("delete-function"),
		func(ctx context.Context, in *NamedPath) (*Accepted, error) { return functionKind.delete(ctx, s, in) })
}

// putFunction creates the function or replaces its spec, keeping the
// uploaded source.
func (s *Server) putFunction(ctx context.Context, in *NamedPath, spec *FunctionSpec) (*One[Function], error) {
	if err := s.requireTenant(ctx, in.Tenant); err != nil {
		return nil, err
	}
	ns, err := s.namespace(ctx, in.Tenant)
	if err != nil {
		return nil, err
	}
	var f slessv1.Function
	err = s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &f)
	if client.IgnoreNotFound(err) != nil {
		return nil, fromKube(ctx, "function "+in.Name, err)
	}
	if err != nil { // not found: create
		f = slessv1.Function{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: ns}}
		applyFunctionSpec(&f.Spec, spec)
		return functionKind.create(ctx, s, in.Tenant, &f)
	}
	applyFunctionSpec(&f.Spec, spec)
	if err := s.Kube.Update(ctx, &f); err != nil {
		return nil, fromKube(ctx, "function "+in.Name, err)
	}
	return &One[Function]{Status: 200, Body: functionREST(&f)}, nil
}
