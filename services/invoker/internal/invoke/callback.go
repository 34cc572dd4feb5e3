package invoke

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/callback"
	"github.com/kube5s/sless/pkg/egress"
	"github.com/kube5s/sless/pkg/headers"
	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
)

// Callbacks POSTs async results to their X-Callback-Url, signed with the
// tenant's callback secret (pkg/callback). A failed delivery (no answer,
// 5xx, 429) returns an error, so the broker holds it for the next backoff
// step until the queue's retries run out and it is dead-lettered. An
// address the egress policy refuses is dead-lettered at once.
type Callbacks struct {
	Client  *http.Client // its dialer applies the egress policy; it follows no redirect
	Secrets callback.DB
	Now     func() time.Time
}

// Handle delivers one callback.
func (c *Callbacks) Handle(ctx context.Context, d *amqp.Delivery) error {
	var cb msg.CallbackRequested
	if err := json.Unmarshal(d.Body, &cb); err != nil || cb.URL == "" {
		return rabbit.Permanent(fmt.Errorf("undecodable %s: %v", msg.TypeCallbackRequested, err))
	}
	body, _ := json.Marshal(cb.Record)
	secret, err := callback.Secret(ctx, c.Secrets, cb.Record.Tenant)
	if err != nil {
		return err
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cb.URL, bytes.NewReader(body))
	if err != nil {
		return rabbit.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sless-callbacks")
	req.Header.Set(headers.InvocationID, cb.Record.InvocationID)
	req.Header.Set(headers.Signature, callback.Sign(secret, now(), body))
	resp, err := c.Client.Do(req)
	if errors.Is(err, egress.ErrNotPublic) {
		return rabbit.Permanent(fmt.Errorf("callback to %s refused: %w", cb.URL, err))
	}
	if err != nil {
		return fmt.Errorf("callback to %s: %w", cb.URL, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return fmt.Errorf("callback to %s answered %d", cb.URL, resp.StatusCode)
	}
	return nil
}
