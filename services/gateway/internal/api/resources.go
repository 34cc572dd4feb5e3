package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2"
	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
)

// Shared inputs and outputs of the resource routes.

// TenantPath names a tenant.
type TenantPath struct {
	Tenant string `path:"t" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"54"`
}

// NamedPath names an object of a tenant.
type NamedPath struct {
	Tenant string `path:"t" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"54"`
	Name   string `path:"name" pattern:"^[a-z]([-a-z0-9]*[a-z0-9])?$" maxLength:"63"`
}

// Page selects a page of a list.
type Page struct {
	Limit  int64  `query:"limit" minimum:"1" maximum:"500" default:"50"`
	Cursor string `query:"cursor" maxLength:"4096" doc:"next_cursor of the previous page"`
}

// ListOut is a page of items.
type ListOut[T any] struct {
	Body struct {
		Items      []T    `json:"items"`
		NextCursor string `json:"next_cursor,omitempty"`
	}
}

// One is a single item.
type One[T any] struct {
	Status   int    // 201 when created, else the operation's default
	Location string `header:"Location"`
	Body     T
}

// Accepted answers a delete: the object goes away once cleanup is done.
type Accepted struct {
	Body struct {
		Status string `json:"status" example:"deleting"`
	}
}

// PatchIn carries a JSON merge patch (RFC 7396).
type PatchIn struct {
	NamedPath
	ContentType string `header:"Content-Type"`
	RawBody     []byte
}

// namespace returns the tenant's namespace after checking the tenant
// exists and its namespace is usable (namespaces.go): the one place a
// tenant-scoped handler resolves the tenant.
func (s *Server) namespace(ctx context.Context, tenant string) (string, error) {
	var t slessv1.Tenant
	if err := s.Kube.Get(ctx, client.ObjectKey{Name: tenant}, &t); err != nil {
		return "", fromKube(ctx, "tenant "+tenant, err)
	}
	if !t.DeletionTimestamp.IsZero() {
		return "", withID(ctx, problem(404, "", "tenant %s is being deleted", tenant))
	}
	return s.usableNamespace(ctx, tenant)
}

// kind ties a REST representation to its custom resource.
type kind[T any, O client.Object, L client.ObjectList] struct {
	name    string // "function"
	plural  string // "functions"
	newObj  func() O
	newList func() L
	items   func(L) []O
	toREST  func(O) T
}

func (k kind[T, O, L]) list(ctx context.Context, s *Server, tenant string, p Page) (*ListOut[T], error) {
	if err := s.requireTenant(ctx, tenant); err != nil {
		return nil, err
	}
	ns, err := s.namespace(ctx, tenant)
	if err != nil {
		return nil, err
	}
	l := k.newList()
	if err := s.Kube.List(ctx, l, client.InNamespace(ns), client.Limit(p.Limit), client.Continue(p.Cursor)); err != nil {
		if strings.Contains(err.Error(), "continue") {
			return nil, withID(ctx, problem(400, "bad-cursor", "the cursor is invalid or expired; start again without it"))
		}
		return nil, fromKube(ctx, k.plural, err)
	}
	out := &ListOut[T]{}
	out.Body.Items = []T{}
	for _, o := range k.items(l) {
		out.Body.Items = append(out.Body.Items, k.toREST(o))
	}
	if m, ok := any(l).(metav1.ListInterface); ok {
		out.Body.NextCursor = m.GetContinue()
	}
	return out, nil
}

func (k kind[T, O, L]) get(ctx context.Context, s *Server, in *NamedPath) (*One[T], error) {
	if err := s.requireTenant(ctx, in.Tenant); err != nil {
		return nil, err
	}
	ns, err := s.namespace(ctx, in.Tenant)
	if err != nil {
		return nil, err
	}
	o := k.newObj()
	if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, o); err != nil {
		return nil, fromKube(ctx, k.name+" "+in.Name, err)
	}
	return &One[T]{Status: 200, Body: k.toREST(o)}, nil
}

func (k kind[T, O, L]) create(ctx context.Context, s *Server, tenant string, o O) (*One[T], error) {
	if err := s.Kube.Create(ctx, o); err != nil {
		return nil, fromKube(ctx, k.name+" "+o.GetName(), err)
	}
	if fn, ok := any(o).(*slessv1.Function); ok {
		s.awaitCached(ctx, fn)
	}
	loc := fmt.Sprintf("/v1/tenants/%s/%s/%s", tenant, k.plural, o.GetName())
	if k.plural == "tenants" {
		loc = "/v1/tenants/" + o.GetName()
	}
	return &One[T]{Status: 201, Location: loc, Body: k.toREST(o)}, nil
}

func (k kind[T, O, L]) delete(ctx context.Context, s *Server, in *NamedPath) (*Accepted, error) {
	if err := s.requireTenant(ctx, in.Tenant); err != nil {
		return nil, err
	}
	ns, err := s.namespace(ctx, in.Tenant)
	if err != nil {
		return nil, err
	}
	o := k.newObj()
	o.SetNamespace(ns)
	o.SetName(in.Name)
	if err := s.Kube.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		return nil, fromKube(ctx, k.name+" "+in.Name, err)
	}
	out := &Accepted{}
	out.Body.Status = "deleting"
	return out, nil
}

// specKind is a kind whose spec a tenant writes (functions, triggers,
// jobs): create, replace and merge patch are one path for all of them.
type specKind[T, S any, O client.Object, L client.ObjectList] struct {
	kind[T, O, L]
	// apply writes a REST spec onto the resource's spec. Create (POST, or
	// PUT of a new name), replace (PUT) and merge patch all go through it,
	// so an optional field left out takes the same default on each: apply
	// leaves it unset and the custom resource's schema defaults it, as the
	// Kubernetes API does for a create and a full update alike.
	apply func(O, *S)
	check func(context.Context, *S) error // what the schema cannot say; nil: nothing
}

// Replacement is the body of a PUT: the object as GET returns it. The
// read-only fields are accepted so that a client can send back what it
// read; they are ignored, and a name must be the path's.
type Replacement[S any] interface {
	replacement() (name string, spec *S)
}

// post creates the object (409 if it exists).
func (k specKind[T, S, O, L]) post(ctx context.Context, s *Server, tenant, name string, spec *S) (*One[T], error) {
	if err := s.requireTenant(ctx, tenant); err != nil {
		return nil, err
	}
	ns, err := s.namespace(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if err := k.validate(ctx, spec); err != nil {
		return nil, err
	}
	o := k.newObj()
	o.SetNamespace(ns)
	o.SetName(name)
	k.apply(o, spec)
	return k.create(ctx, s, tenant, o)
}

// put creates the object or replaces its spec whole: what the body leaves
// out takes its default, exactly as on post.
func (k specKind[T, S, O, L]) put(ctx context.Context, s *Server, in *NamedPath, body Replacement[S]) (*One[T], error) {
	name, spec := body.replacement()
	if err := s.requireTenant(ctx, in.Tenant); err != nil {
		return nil, err
	}
	if name != "" && name != in.Name {
		msg := fmt.Sprintf("must be the name in the path (%s); a PUT cannot rename a %s", in.Name, k.name)
		return nil, withID(ctx, problem(422, "", "body.name %q %s", name, msg).field("body.name", msg))
	}
	ns, err := s.namespace(ctx, in.Tenant)
	if err != nil {
		return nil, err
	}
	if err := k.validate(ctx, spec); err != nil {
		return nil, err
	}
	o := k.newObj()
	err = s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, o)
	if client.IgnoreNotFound(err) != nil {
		return nil, fromKube(ctx, k.name+" "+in.Name, err)
	}
	if err != nil { // not found: create
		o = k.newObj()
		o.SetNamespace(ns)
		o.SetName(in.Name)
		k.apply(o, spec)
		return k.create(ctx, s, in.Tenant, o)
	}
	return k.update(ctx, s, o, spec)
}

// patch applies a JSON merge patch to the REST representation.
func (k specKind[T, S, O, L]) patch(ctx context.Context, s *Server, in *PatchIn) (*One[T], error) {
	if err := s.requireTenant(ctx, in.Tenant); err != nil {
		return nil, err
	}
	ns, err := s.namespace(ctx, in.Tenant)
	if err != nil {
		return nil, err
	}
	o := k.newObj()
	if err := s.Kube.Get(ctx, client.ObjectKey{Namespace: ns, Name: in.Name}, o); err != nil {
		return nil, fromKube(ctx, k.name+" "+in.Name, err)
	}
	var spec S
	if err := mergePatch(ctx, k.toREST(o), in, &spec); err != nil {
		return nil, err
	}
	if err := k.validate(ctx, &spec); err != nil {
		return nil, err
	}
	return k.update(ctx, s, o, &spec)
}

func (k specKind[T, S, O, L]) validate(ctx context.Context, spec *S) error {
	if k.check == nil {
		return nil
	}
	return k.check(ctx, spec)
}

func (k specKind[T, S, O, L]) update(ctx context.Context, s *Server, o O, spec *S) (*One[T], error) {
	k.apply(o, spec)
	if err := s.Kube.Update(ctx, o); err != nil {
		return nil, fromKube(ctx, k.name+" "+o.GetName(), err)
	}
	return &One[T]{Status: 200, Body: k.toREST(o)}, nil
}

// mergePatch applies a JSON merge patch to the current REST representation
// of an object and decodes the result into spec, refusing unknown and
// read-only fields.
func mergePatch[T any](ctx context.Context, current any, in *PatchIn, spec *T) error {
	if ct := strings.TrimSpace(strings.Split(in.ContentType, ";")[0]); ct != "application/merge-patch+json" && ct != "application/json" {
		return withID(ctx, problem(415, "", "PATCH takes application/merge-patch+json, not %q", in.ContentType))
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(in.RawBody, &probe); err != nil {
		return withID(ctx, problem(400, "malformed-json", "the body is not a JSON object: %v", err))
	}
	for _, ro := range []string{"name", "status", "created_at", "source"} {
		if _, ok := probe[ro]; ok {
			return withID(ctx, problem(422, "", "%s is read-only", ro).field("body."+ro, "read-only"))
		}
	}
	cur, err := json.Marshal(current)
	if err != nil {
		return err
	}
	merged, err := jsonpatch.MergePatch(cur, in.RawBody)
	if err != nil {
		return withID(ctx, problem(400, "malformed-json", "the merge patch cannot be applied: %v", err))
	}
	var m map[string]json.RawMessage
	_ = json.Unmarshal(merged, &m)
	for _, ro := range []string{"name", "status", "created_at", "source"} {
		delete(m, ro)
	}
	merged, _ = json.Marshal(m)
	// The result meets the schema a POST or PUT body meets (ranges,
	// patterns, enums): a patch is no way around them.
	var doc any
	_ = json.Unmarshal(merged, &doc)
	ps := schemaOf[T]()
	pb := huma.NewPathBuffer([]byte{}, 0)
	pb.Push("body")
	res := &huma.ValidateResult{}
	huma.Validate(ps.reg, ps.schema, pb, huma.ModeWriteToServer, doc, res)
	if len(res.Errors) > 0 {
		return withID(ctx, problem(422, "", "the patched object is invalid").fields(res.Errors...))
	}
	dec := json.NewDecoder(strings.NewReader(string(merged)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(spec); err != nil {
		p := problem(422, "", "the patched object is invalid: %v", err)
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			// A number out of the field's type (an int32 given 2^40):
			// named as the schema's checks name a field.
			p.field("body."+te.Field, fmt.Sprintf("expected %s, not %s", te.Type, te.Value))
		}
		return withID(ctx, p)
	}
	return nil
}

// specSchema is the schema of a REST spec type, in a registry of its own:
// the API's registry holds only what its operations name, and it is not
// written once the server serves.
type specSchema struct {
	reg    huma.Registry
	schema *huma.Schema
}

var specSchemas sync.Map // reflect.Type: specSchema

// schemaOf is the schema huma checks a T against, built once.
func schemaOf[T any]() specSchema {
	t := reflect.TypeFor[T]()
	if v, ok := specSchemas.Load(t); ok {
		return v.(specSchema)
	}
	reg := huma.NewMapRegistry("#/components/schemas/", huma.DefaultSchemaNamer)
	v, _ := specSchemas.LoadOrStore(t, specSchema{reg: reg, schema: reg.Schema(t, false, "")})
	return v.(specSchema)
}

func register[I, O any](s *Server, op huma.Operation, h func(context.Context, *I) (*O, error)) {
	if op.Tags == nil {
		op.Tags = []string{strings.Split(strings.TrimPrefix(op.Path, "/v1/"), "/")[0]}
	}
	huma.Register(s.api, op, func(ctx context.Context, in *I) (*O, error) {
		out, err := h(ctx, in)
		if err != nil {
			return nil, problemOf(ctx, err)
		}
		return out, nil
	})
}
