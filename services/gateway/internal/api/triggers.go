package api

import (
	"context"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/cronsched"
)

var triggerKind = specKind[Trigger, TriggerSpec, *slessv1.Trigger, *slessv1.TriggerList]{
	kind: kind[Trigger, *slessv1.Trigger, *slessv1.TriggerList]{
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
	},
	apply: func(t *slessv1.Trigger, spec *TriggerSpec) { t.Spec = triggerSpecCR(spec) },
	check: checkTrigger,
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
			return triggerKind.post(ctx, s, in.Tenant, in.Body.Name, &in.Body.TriggerSpec)
		})
	register(s, s.route("get-trigger"),
		func(ctx context.Context, in *NamedPath) (*One[Trigger], error) { return triggerKind.get(ctx, s, in) })
	register(s, s.route("replace-trigger"),
		func(ctx context.Context, in *struct {
			NamedPath
			Body TriggerReplacement
		}) (*One[Trigger], error) {
			return triggerKind.put(ctx, s, &in.NamedPath, &in.Body)
		})
	register(s, s.route("patch-trigger"),
		func(ctx context.Context, in *PatchIn) (*One[Trigger], error) { return triggerKind.patch(ctx, s, in) })
	register(s, s.route("delete-trigger"),
		func(ctx context.Context, in *NamedPath) (*Accepted, error) { return triggerKind.delete(ctx, s, in) })
}
