package patterns_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/blob"
	"github.com/acemq/acemq/patterns"
)

// ReportReady is the metadata of a large report sent through a blob store.
type ReportReady struct {
	Name string `json:"name"`
}

// A dry run lists what a replay would move and moves nothing;
// SkipMissingBlob leaves out the messages whose large payload is gone (here
// the object of the second report was deleted), and the replay then moves
// the rest.
func ExampleDryRun() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	mq, err := acemq.Connect(ctx, "memory://")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mq.Close()
	if err := mq.Declare(ctx, acemq.Queue{Name: "reports"}, acemq.Queue{Name: "reports.dlq"}); err != nil {
		fmt.Println(err)
		return
	}
	store := blob.Memory()
	pub := blob.NewPublisher[ReportReady](mq, store, "", "reports.dlq")
	for _, name := range []string{"march", "april", "may"} {
		ref, err := pub.Send(ctx, ReportReady{Name: name}, strings.NewReader("a large report"))
		if err != nil {
			fmt.Println(err)
			return
		}
		if name == "april" {
			if err := store.Delete(ctx, ref.ID); err != nil {
				fmt.Println(err)
				return
			}
		}
	}

	gone := patterns.SkipMissingBlob(blob.Missing(store))
	list := patterns.Each(func(it patterns.ReplayItem) {
		fmt.Printf("%s: to %s, object gone: %t\n", it.Outcome, it.RoutingKey, it.Missing != "")
	})
	report, err := patterns.Replay(ctx, mq, "reports.dlq", "reports", patterns.DryRun(), gone, list)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("dry run: would move %d, missing %d\n", report.Listed, report.Missing)

	report, err = patterns.Replay(ctx, mq, "reports.dlq", "reports", gone)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("moved %d, missing %d (left on reports.dlq)\n", report.Moved, report.Missing)
	// Output:
	// would move: to reports, object gone: false
	// missing blob: to reports, object gone: true
	// would move: to reports, object gone: false
	// dry run: would move 2, missing 1
	// moved 2, missing 1 (left on reports.dlq)
}
