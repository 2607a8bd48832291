package rabbitmq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq/transport/rabbitmq"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"password", "amqp://user:s3cret@host:5672/vh", "amqp://user:xxxxx@host:5672/vh"},
		{"no password", "amqp://user@host/", "amqp://user@host/"},
		{"no userinfo", "amqp://host/", "amqp://host/"},
		{"amqps with query", "amqps://u:p4ss@h/?heartbeat=5", "amqps://u:xxxxx@h/?heartbeat=5"},
		{"escaped password", "amqp://u:s%2F3cret@h/", "amqp://u:xxxxx@h/"},
		{"unparsable", "amqp://u:s3cr%zz@h/", "amqp://u:xxxxx@h/"},
		{"at sign in password", "amqp://u:a@b%zz@h/", "amqp://u:xxxxx@h/"},
		{"not a URL", "s3cret", "s3cret"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rabbitmq.Redact(tt.in); got != tt.want {
				t.Errorf("Redact(%q) = %q; want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestDialFailureHidesThePassword(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, url string }{
		{"refused", "amqp://user:s3cret@127.0.0.1:1/"},
		{"bad login", strings.Replace(brokerURL(t), "guest:guest@", "guest:s3cret@", 1)},
		{"unparsable", "amqp://user:s3cret%zz@127.0.0.1:1/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tr, err := rabbitmq.Dial(ctx, tt.url, rabbitmq.Config{})
			if err == nil {
				_ = tr.Close()
				t.Fatal("Dial succeeded")
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("the error shows the password: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "rabbitmq: ") {
				t.Errorf("the error %q lacks the rabbitmq: prefix", err)
			}
			t.Logf("%s: %v", tt.name, err)
		})
	}
}

func TestDialHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if tr, err := rabbitmq.Dial(ctx, brokerURL(t), rabbitmq.Config{}); err == nil {
		_ = tr.Close()
		t.Fatal("Dial with an ended ctx succeeded")
	}
}
