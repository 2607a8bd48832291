package brokerctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// needCtl skips t when rabbitmqctl cannot be run, or fails it when the
// broker is required (ACEMQ_REQUIRE_BROKER=1).
func needCtl(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("ACEMQ_REQUIRE_BROKER") == "1" {
			t.Fatalf("%v (ACEMQ_REQUIRE_BROKER=1)", err)
		}
		t.Skip(err)
	}
}

// TempVhost adds a vhost of its own to the broker at baseURL whose default
// queue type is queueType ("quorum", say), gives baseURL's user every
// permission on it, and deletes it (with all it holds) when t ends. It
// returns baseURL with the vhost's path. It needs rabbitmqctl (see Var)
// and skips t without it, unless the broker is required.
func TempVhost(t testing.TB, baseURL, queueType string) string {
	t.Helper()
	needCtl(t)
	u, err := url.Parse(baseURL)
	if err != nil {
		t.Fatalf("brokerctl: %v", err)
	}
	user := u.User.Username()
	if user == "" {
		user = "guest"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	vhost := "acemq-test-" + queueType + "-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := Run(ctx, "-q", "add_vhost", vhost, "--default-queue-type", queueType); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := Run(ctx, "-q", "delete_vhost", vhost); err != nil {
			t.Error(err)
		}
	})
	if _, err := Run(ctx, "-q", "set_permissions", "-p", vhost, user, ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + vhost
	u.RawPath = ""
	return u.String()
}

// Queue is one queue as rabbitmqctl lists it.
type Queue struct {
	Name, Type         string
	Durable, Exclusive bool
}

// Queues lists the queues of vhost.
func Queues(ctx context.Context, vhost string) (map[string]Queue, error) {
	out, err := Run(ctx, "-q", "list_queues", "-p", vhost, "--no-table-headers", "name", "type", "durable", "exclusive")
	if err != nil {
		return nil, err
	}
	qs := map[string]Queue{}
	for _, line := range strings.Split(out, "\n") {
		// Tab-separated: a column the broker has no value for (exclusive,
		// for a quorum queue) is empty.
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			continue
		}
		qs[f[0]] = Queue{Name: f[0], Type: f[1], Durable: f[2] == "true", Exclusive: f[3] == "true"}
	}
	return qs, nil
}

// VhostOf is the vhost a URL names ("/" when it names none).
func VhostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || strings.TrimPrefix(u.Path, "/") == "" {
		return "/"
	}
	return strings.TrimPrefix(u.Path, "/")
}
