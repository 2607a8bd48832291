package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/acemqtest"
	"github.com/acemq/acemq/crypt"
	"github.com/tink-crypto/tink-go/v2/keyset"
)

// TestPeekKeyset: peek shows a sealed body's key ID and says it is
// encrypted, showing no bytes of it; with -keyset it opens the body; with
// a keyset that lacks the key it says why the body does not open.
func TestPeekKeyset(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			q := acemqtest.QueueName(t, "peekkeyset")
			if b.name == "rabbitmq" {
				acemqtest.DeleteQueuesAfter(t, u, q)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h, err := crypt.NewKeyset()
			if err != nil {
				t.Fatal(err)
			}
			keys, err := crypt.New(h)
			if err != nil {
				t.Fatal(err)
			}
			mq, err := acemq.Connect(ctx, u, acemq.WithBodyCipher(keys))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mq.Close() })
			if err := mq.Declare(ctx, acemq.Queue{Name: q}); err != nil {
				t.Fatal(err)
			}
			if err := acemq.NewPublisher[string](mq, "", q).Send(ctx, "card 4111-SECRET"); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			write := func(name string, h any) string {
				path := filepath.Join(dir, name)
				f, err := os.Create(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				if err := crypt.WriteKeyset(h.(*keysetHandle), f); err != nil {
					t.Fatal(err)
				}
				return path
			}
			good := write("good.json", h)
			other, err := crypt.NewKeyset()
			if err != nil {
				t.Fatal(err)
			}
			bad := write("other.json", other)
			id := itoa(keys.Primary())

			for _, tc := range []struct {
				name string
				args []string
				want []string
				not  string
			}{
				{"no keyset", nil, []string{"sealed       key " + id + ": the body is encrypted; give -keyset FILE to read it"}, "SECRET"},
				{"keyset", []string{"-keyset", good}, []string{"sealed       key " + id + ": opened with -keyset", `body         "card 4111-SECRET"`}, ""},
				{"other keyset", []string{"-keyset", bad}, []string{"does not open with -keyset: acemq: the body does not open: crypt: unknown key " + id}, "SECRET"},
			} {
				r := runCLI(t, append([]string{"-url", u, "peek", q}, tc.args...)...)
				if r.code != exitOK {
					t.Fatalf("%s: exit status %d; stderr:\n%s", tc.name, r.code, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stdout, w) {
						t.Errorf("%s: the output does not contain %q:\n%s", tc.name, w, r.stdout)
					}
				}
				if tc.not != "" && strings.Contains(r.stdout, tc.not) {
					t.Errorf("%s: the output shows %q:\n%s", tc.name, tc.not, r.stdout)
				}
			}
			r := runCLI(t, "-url", u, "peek", q, "-keyset", filepath.Join(dir, "absent.json"))
			if r.code == exitOK || !strings.Contains(r.stderr, "acemq: -keyset:") {
				t.Errorf("a missing keyset file: exit %d, stderr %s", r.code, r.stderr)
			}
		})
	}
}

type keysetHandle = keyset.Handle

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// TestReplayKeyset: replay moves sealed bodies as they are, needing no
// key; with -keyset it first reports the ones that do not open (here one
// sealed under a keyset the operator does not have), and moves them all
// the same.
func TestReplayKeyset(t *testing.T) {
	t.Parallel()
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			u := b.url(t)
			from, to := acemqtest.QueueName(t, "replaykeyset-from"), acemqtest.QueueName(t, "replaykeyset-to")
			if b.name == "rabbitmq" {
				acemqtest.DeleteQueuesAfter(t, u, from, to)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			known, err := crypt.NewKeyset()
			if err != nil {
				t.Fatal(err)
			}
			lost, err := crypt.NewKeyset()
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, h := range []*keysetHandle{known, lost} {
				keys, err := crypt.New(h)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, itoa(keys.Primary()))
				mq, err := acemq.Connect(ctx, u, acemq.WithBodyCipher(keys))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = mq.Close() })
				if err := mq.Declare(ctx, acemq.Queue{Name: from}, acemq.Queue{Name: to}); err != nil {
					t.Fatal(err)
				}
				if err := acemq.NewPublisher[string](mq, "", from).Send(ctx, "SECRET"); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(t.TempDir(), "keyset.json")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := crypt.WriteKeyset(known, f); err != nil {
				t.Fatal(err)
			}
			_ = f.Close()

			r := runCLI(t, "-url", u, "replay", from, to, "-keyset", path, "-progress", "0")
			if r.code != exitOK {
				t.Fatalf("exit status %d; stderr:\n%s", r.code, r.stderr)
			}
			for _, want := range []string{
				"(key " + ids[1] + "): acemq: the body does not open: crypt: unknown key " + ids[1],
				"2 messages sealed, 1 of them not opening with -keyset (they will be parked again)",
				"moved 2, skipped 0, failed 0",
			} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("the output does not contain %q:\n%s", want, r.stdout)
				}
			}
			if strings.Contains(r.stdout, ids[0]+")") || strings.Contains(r.stdout, "SECRET") {
				t.Errorf("the output names the key that opens, or shows a body:\n%s", r.stdout)
			}
		})
	}
}
