// Package transporttest is the conformance suite every acemq transport
// passes, in the manner of testing/slogtest: a transport's own test calls
// Run with a way to open clients on one broker, and the suite checks the
// promises the transport package documents, each in its own subtest.
//
//	func TestConformance(t *testing.T) {
//		b := memory.NewBroker()
//		transporttest.Run(t, func(*testing.T) transport.Transport { return b.Connect() },
//			transporttest.Features{QuorumQueues: true})
//	}
//
// # What it asks of the broker
//
// The broker may be shared with other tests: every subtest names its queues
// and exchanges "tt.<subtest>.<random>.<what>" and deletes them when it
// ends. Subtests run in parallel.
//
// # What it demands beyond the transport package
//
// Where the contract leaves a choice, the suite settles it:
//
//   - A missing exchange (on Publish or in a Binding) and a missing queue (in
//     a Binding, and for Consume, Get and Inspect) fail with an error
//     wrapping transport.ErrNotFound; a Request that no queue takes with
//     transport.ErrUnroutable.
//   - A conflict error names the queue or exchange that conflicts.
//   - A client stays usable after any of these errors (on RabbitMQ they
//     close the channel; the transport must hide that).
//   - What RabbitMQ would refuse or mangle fails Declare or Publish before
//     the broker sees it, with an acemq error naming the field and the
//     limit: a name or key over 255 bytes, a queue argument name over 255
//     bytes, a NaN or infinite float, a time past the year 9999. The client
//     stays healthy and usable.
//   - A delivery's Redelivered is true after Nack with requeue and after the
//     client that held it closed.
//   - A second Close returns nil or an error wrapping transport.ErrClosed.
//   - With QuorumQueues, a message on a quorum queue with x-delivery-limit N
//     is delivered N+1 times, nacked with requeue each time, and then
//     dead-lettered.
//
// Queue arguments are sent as RabbitMQ wants them: integers as int64,
// exchange names and routing keys as strings.
//
// # How messages are compared
//
// Every Message field must arrive as published, except that Timestamp is
// compared to the second and header values after the normalisation an AMQP
// wire makes unavoidable: integers compare by value whatever their width,
// floats as float64, times to the second in any location, nested tables as
// maps with string keys of any named type, arrays as []any, and a nil map or
// slice as an empty one. Strings, bools and []byte must come back unchanged.
// The suite sends header values of types string, bool, int32, int64,
// float64, []byte, time.Time, map[string]any and []any.
package transporttest

import (
	"testing"
	"time"

	"github.com/acemq/acemq/transport"
)

// Features describes where a transport under test may differ from the rest.
// The zero value suits an in-process transport.
type Features struct {
	// QuorumQueues says the broker runs quorum queues: the suite then also
	// checks that a message nacked with requeue more often than a quorum
	// queue's x-delivery-limit is dead-lettered, and runs its
	// single-active-consumer and hand-over cases on quorum queues too.
	QuorumQueues bool

	// Timeout bounds each wait for something that must happen: a delivery,
	// a confirm, Consume returning. Zero means 10 seconds.
	Timeout time.Duration

	// Quiet is how long the suite watches for something that must not
	// happen, such as a delivery beyond the prefetch or Consume returning
	// while deliveries are unsettled. Longer is stricter. Zero means 300ms.
	Quiet time.Duration

	// ErrorPrefix is how the transport's own errors begin, such as
	// "rabbitmq: ": the suite checks that an error refusing something it
	// sent starts with it. Empty skips that check.
	ErrorPrefix string
}

// Run runs the conformance suite as parallel subtests of t. newTransport
// must return a new, open client each time it is called, every one of them
// connected to the same broker during one Run; the suite closes each client
// it opens. Any subtest may be selected with go test -run as usual.
func Run(t *testing.T, newTransport func(t *testing.T) transport.Transport, f Features) {
	t.Helper()
	if f.Timeout <= 0 {
		f.Timeout = 10 * time.Second
	}
	if f.Quiet <= 0 {
		f.Quiet = 300 * time.Millisecond
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.quorum && !f.QuorumQueues {
				t.Skip("needs quorum queues: Features.QuorumQueues is false")
			}
			t.Parallel()
			tc.run(newEnv(t, newTransport, f))
		})
	}
}

// testCase is one subtest of the suite.
type testCase struct {
	name   string
	quorum bool // needs Features.QuorumQueues
	run    func(e *env)
}

// cases lists the subtests in the order they are reported.
var cases = []testCase{
	{name: "RoundTrip", run: testRoundTrip},
	{name: "PropertiesOnly", run: testPropertiesOnly},
	{name: "PublisherBuffersReusable", run: testPublisherBuffers},
	{name: "Unroutable", run: testUnroutable},
	{name: "MissingExchange", run: testMissingExchange},
	{name: "PublishEndedContext", run: testPublishEndedContext},
	{name: "RoutingDirect", run: testRoutingDirect},
	{name: "RoutingTopic", run: testRoutingTopic},
	{name: "RoutingFanout", run: testRoutingFanout},
	{name: "ConcurrentPublish", run: testConcurrentPublish},
	{name: "PublishBatch", run: testPublishBatch},
	{name: "Prefetch", run: testPrefetch},
	{name: "AckRemoves", run: testAckRemoves},
	{name: "NackRequeue", run: testNackRequeue},
	{name: "NackDeadLetters", run: testNackDeadLetters},
	{name: "TTLDeadLetters", run: testTTLDeadLetters},
	{name: "CompetingConsumers", run: testCompetingConsumers},
	{name: "ConsumeWaitsForSettlement", run: testConsumeWaits},
	{name: "ConsumeMissingQueue", run: testConsumeMissingQueue},
	{name: "CloseRequeues", run: testCloseRequeues},
	{name: "Get", run: testGet},
	{name: "RequestReply", run: testRequestReply},
	{name: "RequestContext", run: testRequestContext},
	{name: "DeclareIdempotent", run: testDeclareIdempotent},
	{name: "DeclareConflict", run: testDeclareConflict},
	{name: "DeclareMissing", run: testDeclareMissing},
	{name: "DeclareOverLimits", run: testDeclareOverLimits},
	{name: "PublishOverLimits", run: testPublishOverLimits},
	{name: "Inspect", run: testInspect},
	{name: "DeleteQueue", run: testDeleteQueue},
	{name: "DeleteExchange", run: testDeleteExchange},
	{name: "Close", run: testClose},
	{name: "QuorumDeliveryLimit", quorum: true, run: testQuorumDeliveryLimit},
	{name: "ExchangeBinding", run: testExchangeBinding},
	{name: "ConsistentHash", run: testConsistentHash},
	{name: "ConsistentHashWeights", run: testConsistentHashWeights},
	{name: "SingleActiveConsumer", run: func(e *env) { testSingleActiveConsumer(e, false) }},
	{name: "SingleActiveConsumerQuorum", quorum: true, run: func(e *env) { testSingleActiveConsumer(e, true) }},
	{name: "Lease", run: testLease},
	{name: "LeaseHolderCloses", run: testLeaseHolderCloses},
	{name: "HandOver", run: func(e *env) { testHandOver(e, false) }},
	{name: "HandOverQuorum", quorum: true, run: func(e *env) { testHandOver(e, true) }},
	{name: "HandOverWaitsForRelease", run: testHandOverWaits},
	{name: "ReleaseOnlyHandOver", run: testReleaseOnlyHandOver},
	{name: "FenceSequential", run: testFenceSequential},
	{name: "FenceConcurrent", run: testFenceConcurrent},
	{name: "FenceClientDies", run: testFenceClientDies},
	{name: "FenceConflict", run: testFenceConflict},
}
