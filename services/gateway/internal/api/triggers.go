package api

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
)

var triggerKind = kind[Trigger, *slessv1.Trigger, *slessv1.TriggerList]{
	name: "trigger", plural: "triggers",
	newObj: func() *slessv1.Trigger { return &slessv1.Trigger{} }, newList: func() *slessv1.TriggerList { return &slessv1.TriggerList{} },
	items: func(l *slessv1.TriggerList) []*slessv1.Trigger {
		out := make([]*slessv1.Trigger, len(l.Items))
		for i := range l.Items {
			out[i] = &l.Items[i]
		}
		return out
	},
	toREST: func(t *slessv1.Trigger) Trigger { return triggerREST(t) },
}

// checkTrigger validates what the schema cannot: the cron expression and
// time zone, so a bad schedule is refused here rather than failing later,
// and queue and exchange names that the broker reserves (amq.*).
func checkTrigger(ctx context.Context, spec *TriggerSpec) error {
	if spec.Type == "cron" && spec.Cron != nil {
		if _, err := cronsched.Parse(spec.Cron.Schedule, spec.Cron.TimeZone); err != nil {
			return withID(ctx, problem(422, "", "%v", err).field("body.cron.schedule", err.Error()))
		}
	}
	if q := spec.Queue; q != nil {
		for _, f := range []struct{ field, name string }{
			{"body.queue.queue", q.Queue}, {"body.queue.exchange", q.Exchange}, {"body.queue.dead_letter_queue", q.DeadLetterQueue},
		} {
			if slessv1.IsReservedBrokerName(f.name) {
				msg := "names starting with amq. are reserved by the broker"
				return withID(ctx, problem(422, "", "%s %q: %s", f.field, f.name, msg).field(f.field, msg))
			}
		}
	}
	return nil
}

func (s *Server) registerTriggers() {
	register(s, s.route("list-triggers"),
		func(ctx context.Context, in *struct {
			TenantPath
			Page
		}) (*ListOut[Trigger], error) {
			return triggerKind.list(ctx, s, in.Tenant, in.Page)
		})
	register(s, s.route("create-trigger"),
		func(ctx context.Context, in *struct {
			TenantPath
			Body TriggerInput
		}) (*One[Trigger], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			if err := checkTrigger(ctx, &in.Body.TriggerSpec); err != nil {
				return nil, err
			}
			t := &slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: in.Body.Name, Namespace: ns}, Spec: triggerSpecCR(&in.Body.TriggerSpec)}
			return triggerKind.create(ctx, s, in.Tenant, t)
		})
	register(s, s.route("get-trigger"),
		func(ctx context.Context, in *NamedPath) (*One[Trigger], error) { return triggerKind.get(ctx, s, in) })
	register(s, s.route("replace-trigger"),
		func(ctx context.Context, in *struct {
			NamedPath
			Body TriggerSpec
		}) (*One[Trigger], error) {
			return s.putTrigger(ctx, &in.NamedPath, &in.Body)
		})
	register(s, s.route("patch-trigger"),
		func(ctx context.Context, in *PatchIn) (*One[Trigger], error) {
			if err := s.requireTenant(ctx, in.Tenant); err != nil {
				return nil, err
			}
			ns, err := s.namespace(ctx, in.Tenant)
			if err != nil {
				return nil, err
			}
			var t slessv1.Trigger
			if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &t); err != nil {
				return nil, fromKube(ctx, "trigger "+in.Name, err)
			}
			var spec TriggerSpec
			if err := mergePatch(ctx, triggerREST(&t), in, &spec); err != nil {
				return nil, err
			}
			if err := checkTrigger(ctx, &spec); err != nil {
				return nil, err
			}
			t.Spec = triggerSpecCR(&spec)
			if err := s.Kube.Update(ctx, &t); err != nil {
				return nil, fromKube(ctx, "trigger "+in.Name, err)
			}
			return &One[Trigger]{Status: 200, Body: triggerREST(&t)}, nil
		})
	register(s, s.route("delete-trigger"),
		func(ctx context.Context, in *NamedPath) (*Accepted, error) { return triggerKind.delete(ctx, s, in) })
}

func (s *Server) putTrigger(ctx context.Context, in *NamedPath, spec *TriggerSpec) (*One[Trigger], error) {
	if err := s.requireTenant(ctx, in.Tenant); err != nil {
		return nil, err
	}
	ns, err := s.namespace(ctx, in.Tenant)
	if err != nil {
		return nil, err
	}
	if err := checkTrigger(ctx, spec); err != nil {
		return nil, err
	}
	var t slessv1.Trigger
	err = s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, &t)
	if client.IgnoreNotFound(err) != nil {
		return nil, fromKube(ctx, "trigger "+in.Name, err)
	}
	if err != nil {
		t = slessv1.Trigger{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: ns}, Spec: triggerSpecCR(spec)}
		return triggerKind.create(ctx, s, in.Tenant, &t)
	}
	t.Spec = triggerSpecCR(spec)
	if err := s.Kube.Update(ctx, &t); err != nil {
		return nil, fromKube(ctx, "trigger "+in.Name, err)
	}
	return &One[Trigger]{Status: 200, Body: triggerREST(&t)}, nil
}
