package invoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/pgtext"
	"github.com/kube5s/sless/pkg/rabbit"
)

// DeadLetter records that req is given up on, with the request
// itself so that it can be replayed, before the message moves to its
// dead-letter queue: a tenant sees and replays dead letters through the
// API, not in the broker.
func (e *Executor) DeadLetter(ctx context.Context, req *msg.InvocationRequested, reason, why string, attempts int32) error {
	m := &msg.InvocationDeadLettered{InvocationID: req.InvocationID, Tenant: req.Tenant, Function: req.Function, Trigger: req.Trigger,
		TriggerName: req.TriggerName, Reason: reason, Error: why, Attempts: attempts, Request: *req,
		DeadLetteredAt: time.Now().UTC()}
	if err := e.Publisher.PublishMessage(ctx, m); err != nil {
		return fmt.Errorf("publish dead letter %s: %w", req.InvocationID, err)
	}
	return nil
}

// maxInlineRequest is the largest request kept in the dead_letters row;
// a larger one goes to the object store.
const maxInlineRequest = 64 << 10

// DeadLetters writes invocation.deadlettered.v1 to the dead_letters table
// (and a large request to the object store). It is idempotent on the
// invocation id; while the database is down the messages wait in their
// queue.
type DeadLetters struct {
	DB    *pgxpool.Pool
	Store ResultStore
}

// Handle stores one dead letter.
func (w *DeadLetters) Handle(ctx context.Context, d *amqp.Delivery) error {
	var m msg.InvocationDeadLettered
	if err := json.Unmarshal(d.Body, &m); err != nil || m.InvocationID == "" || m.Tenant == "" {
		return rabbit.Permanent(fmt.Errorf("undecodable %s: %v", msg.TypeInvocationDeadLettered, err))
	}
	req, err := json.Marshal(m.Request)
	if err != nil {
		return rabbit.Permanent(fmt.Errorf("encode the request of dead letter %s: %w", m.InvocationID, err))
	}
	var inline []byte
	var key any
	if len(req) > maxInlineRequest {
		k := objstore.RequestKey(m.Tenant, m.InvocationID)
		if err := w.Store.Put(ctx, k, bytes.NewReader(req), int64(len(req)), "application/json"); err != nil {
			return fmt.Errorf("store the request of dead letter %s: %w", m.InvocationID, err)
		}
		key = k
	} else {
		inline = req
	}
	_, err = w.DB.Exec(ctx, `INSERT INTO dead_letters (id, tenant, function, trigger_kind, trigger_name, reason, error, attempts,
		request, request_key, request_bytes, dead_lettered_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (id) DO NOTHING`,
		pgtext.Clean(m.InvocationID), pgtext.Clean(m.Tenant), pgtext.Clean(m.Function), pgtext.Clean(string(m.Trigger)),
		pgtext.Clean(m.TriggerName), pgtext.Clean(m.Reason), nullIfEmpty(pgtext.Clean(m.Error)), max(m.Attempts, 1),
		inline, key, len(m.Request.Request.Body), m.DeadLetteredAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23")) {
		return rabbit.Permanent(fmt.Errorf("dead letter %s refused by the database: %w", m.InvocationID, err))
	}
	if err != nil {
		return fmt.Errorf("write dead letter %s: %w", m.InvocationID, err)
	}
	return nil
}

// nullIfEmpty stores an empty string as NULL.
func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
