package queuetrigger

import (
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

func TestTenantVhostURL(t *testing.T) {
	full := map[string][]byte{"username": []byte("sless-t-acme"), "password": []byte("pw_1-x"), "vhost": []byte("sless-t-acme")}
	for _, tc := range []struct {
		name, platform string
		data           map[string][]byte
		want           string
		wantErr        bool
	}{
		{"platform user and vhost replaced", "amqps://ops:secret@mq.internal:5671/platform", full, "amqps://sless-t-acme:pw_1-x@mq.internal:5671/sless-t-acme", false},
		{"no password", "amqp://127.0.0.1:5672/", map[string][]byte{"username": []byte("u"), "vhost": []byte("v")}, "", true},
		{"no secret data", "amqp://127.0.0.1:5672/", nil, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tenantVhostURL(tc.platform, tc.data)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("tenantVhostURL = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestRefusalReason(t *testing.T) {
	for _, tc := range []struct {
		err    error
		reason string
		ok     bool
	}{
		{fmt.Errorf("declare queue q.dlq: %w", &amqp.Error{Code: amqp.PreconditionFailed}), "PreconditionFailed", true},
		{&amqp.Error{Code: amqp.NotFound}, "NotFound", true},
		{&amqp.Error{Code: amqp.AccessRefused}, "AccessRefused", true},
		{&amqp.Error{Code: amqp.ResourceLocked}, "ResourceLocked", true},
		{&amqp.Error{Code: amqp.ConnectionForced}, "", false},
		{errors.New("delivery channel closed"), "", false},
	} {
		reason, ok := refusalReason(tc.err)
		if reason != tc.reason || ok != tc.ok {
			t.Errorf("refusalReason(%v) = %q, %v; want %q, %v", tc.err, reason, ok, tc.reason, tc.ok)
		}
	}
}
