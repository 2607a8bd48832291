package repotest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestMisplacedOptionsDoNotCompile type-checks calls of the consumer
// constructors against the root package as it is built: every option in
// the place it belongs compiles, as code written before the options were
// typed by place does (NewBatchConsumer(c, q, h, BatchSize(10),
// Concurrency(2))), and each misplaced one is a compile error naming the
// option's type and the method it lacks.
func TestMisplacedOptionsDoNotCompile(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	const head = `package snippet

import (
	"context"
	"time"

	"github.com/acemq/acemq"
)

type T struct{ ID string }

var (
	c   *acemq.Conn
	ctx = context.Background()
	h   acemq.Handler[T]
	bh  acemq.BatchHandler[T]
	_   = time.Second
)

func f() {
`
	for _, tc := range []struct {
		name, body string
		want       string // a part of the one error; empty when it compiles
	}{
		{name: "every option where it belongs", body: `
	any := []acemq.AnyConsumerOption{
		acemq.Concurrency(2), acemq.Prefetch(10), acemq.WithConsumerRetry(acemq.RetryPolicy{}),
		acemq.Bind("x", "k"), acemq.Quorum(), acemq.NoDeclare(), acemq.DeclareContext(ctx),
		acemq.MaxBodySize(1 << 20), acemq.AcceptTypes("A"), acemq.Nonessential(),
		acemq.KillSwitch(acemq.KillSwitchPolicy{}),
	}
	plain := []acemq.ConsumerOption{acemq.Ordered(acemq.OrderPolicy{})}
	batch := []acemq.BatchConsumerOption{acemq.BatchSize(10), acemq.BatchWait(time.Second)}
	for _, o := range any {
		plain = append(plain, o)
		batch = append(batch, o)
	}
	_, _ = acemq.NewConsumer(c, "q", h, plain...)
	_ = acemq.NewRouter(c, "q", plain...)
	_, _ = acemq.NewBatchConsumer(c, "q", bh, batch...)
	_, _ = acemq.NewBatchConsumer(c, "q", bh, acemq.BatchSize(10), acemq.Concurrency(2))
	_, _ = acemq.NewConsumer(c, "q", h, acemq.Concurrency(2), acemq.Ordered(acemq.OrderPolicy{Partitions: 4}))
	_ = acemq.NewRouter(c, "q", acemq.Concurrency(4), acemq.Ordered(acemq.OrderPolicy{}))
`},
		{name: "BatchSize to NewConsumer", body: `_, _ = acemq.NewConsumer(c, "q", h, acemq.BatchSize(10))`,
			want: "acemq.BatchConsumerOption does not implement acemq.ConsumerOption (missing method applyConsumer)"},
		{name: "BatchWait to NewConsumer", body: `_, _ = acemq.NewConsumer(c, "q", h, acemq.Concurrency(1), acemq.BatchWait(time.Second))`,
			want: "acemq.BatchConsumerOption does not implement acemq.ConsumerOption (missing method applyConsumer)"},
		{name: "BatchSize to NewRouter", body: `_ = acemq.NewRouter(c, "q", acemq.BatchSize(10))`,
			want: "acemq.BatchConsumerOption does not implement acemq.ConsumerOption (missing method applyConsumer)"},
		{name: "Ordered to NewBatchConsumer", body: `_, _ = acemq.NewBatchConsumer(c, "q", bh, acemq.Ordered(acemq.OrderPolicy{}))`,
			want: "acemq.ConsumerOption does not implement acemq.BatchConsumerOption (missing method applyBatchConsumer)"},
		{name: "BatchSize among ConsumerOptions", body: `_ = []acemq.ConsumerOption{acemq.BatchSize(10)}`,
			want: "missing method applyConsumer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "snippet.go", head+tc.body+"\n}\n", 0)
			if err != nil {
				t.Fatal(err)
			}
			errs := typeCheck(t, root, fset, []*ast.File{f})
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Fatalf("does not compile: %v", errs)
			case tc.want == "":
			case len(errs) != 1:
				t.Fatalf("%d errors, want one saying %q: %v", len(errs), tc.want, errs)
			case !strings.Contains(errs[0].Error(), tc.want):
				t.Fatalf("error %q does not say %q", errs[0], tc.want)
			}
		})
	}
}
