package invoke

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/kube5s/sless/pkg/msg"
	"github.com/kube5s/sless/pkg/rabbit"
)

// Callbacks POSTs async results to their X-Callback-Url. A failed delivery
// returns an error, so the broker holds it for the next backoff step.
type Callbacks struct {
	Client *http.Client
}

// Handle delivers one callback.
func (c *Callbacks) Handle(ctx context.Context, d *amqp.Delivery) error {
	var cb msg.CallbackRequested
	if err := json.Unmarshal(d.Body, &cb); err != nil || cb.URL == "" {
		return rabbit.Permanent(fmt.Errorf("undecodable %s: %v", msg.TypeCallbackRequested, err))
	}
	body, _ := json.Marshal(cb.Record)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cb.URL, bytes.NewReader(body))
	if err != nil {
		return rabbit.Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Sless-Invocation-Id", cb.Record.InvocationID)
	resp, err := c.Client.Do(req)
	if err != nil {
		return fmt.Errorf("callback to %s: %w", cb.URL, err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return fmt.Errorf("callback to %s answered %d", cb.URL, resp.StatusCode)
	}
	return nil
}
