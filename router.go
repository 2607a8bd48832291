package acemq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/acemq/acemq/transport"
)

// Router takes deliveries from one queue that carries several message types
// and hands each to the handler routed for its Envelope.Type. Everything
// but the choice of handler is a Consumer's: the consume interceptors, the
// retry ladder and its queues, the settlements, the metrics, Shutdown. A
// message whose type no route takes (a message with no type among them) is
// parked, reason `no handler for type "X" on queue "Q"`.
type Router struct {
	e   *engine
	err error // an invalid option, from NewRouter, reported by every Run

	mu         sync.Mutex
	routes     []namedRoute // in the order Route was called
	undeclared bool         // NewRouter's declaration failed: Run declares first
}

type namedRoute struct {
	name string
	r    route
	err  error
}

// RouteOption configures one route of a Router. TypeName is one: it names
// the type the route takes instead of its T's name.
type RouteOption interface{ applyRoute(*routeConfig) }

type routeConfig struct {
	typeName string
}

// NewRouter returns a router of queue. Like NewConsumer, and with the same
// options, it declares the queue and its ladder before it returns unless
// NoDeclare is given. An invalid option (AcceptTypes among them: a route
// takes a TypeName instead) is found before any I/O, and every Run returns
// it. A declaration that fails is tried again by Run, which returns its
// error while it still fails: a Router built while the broker was down or
// refused the queue works once that is fixed. Add handlers with Route, then
// start it with Run.
//
// NewRouter returns no error, so the Router is in Conn.HealthReport from
// here on, as a Consumer is: faulted (and failing Health) while an option
// is invalid or, until a Run declares them, its queues are not declared;
// faulted for good once Route is given an invalid route. Every method of a
// Router NewRouter could not make is safe, and does what it can: Topology
// lists nothing (it declared nothing), Pause, Resume and Partitions do
// nothing, Close takes it off the Conn, Run returns the error.
func NewRouter(c *Conn, queue string, opts ...ConsumerOption) *Router {
	e, err := newEngine(c, queue, "router", opts, nil)
	switch {
	case e != nil && err != nil:
		c.register(e)
		e.setState(StateFaulted, err)
		return &Router{e: e, undeclared: true}
	case err != nil && c != nil && queue != "" && !errors.Is(err, ErrClosed):
		// An engine that never runs, so that the report shows the error.
		bare := &engine{conn: c, queue: queue, who: "router"}
		for _, o := range opts {
			if o != nil {
				o.applyConsumer(&bare.cfg)
			}
		}
		bare.mode = unmadeMode{err}
		c.register(bare)
		bare.setFault(err)
		return &Router{e: bare, err: err}
	}
	return &Router{e: e, err: err}
}

// Route makes h the handler of r's messages of T's type name, or of the name
// TypeName gives. Routes added while Run runs take effect at the next Run.
// Each type may be routed once. A route that is invalid (a type routed
// twice, a nil handler, an empty TypeName) is found here: it is logged at
// Error, the Router is faulted in Conn.HealthReport from now on (and Health
// fails), and every Run returns the error.
func Route[T any](r *Router, h Handler[T], opts ...RouteOption) {
	if r == nil {
		return
	}
	cfg := routeConfig{typeName: typeName[T]()}
	for _, o := range opts {
		if o != nil {
			o.applyRoute(&cfg)
		}
	}
	nr := namedRoute{name: cfg.typeName, r: &typedRoute[T]{handler: h, name: typeName[T]()}}
	switch {
	case h == nil:
		nr.err = fmt.Errorf("the route for type %q has a nil handler", cfg.typeName)
	case cfg.typeName == "":
		nr.err = fmt.Errorf("a route of %s was given an empty TypeName", typeName[T]())
	}
	r.mu.Lock()
	if nr.err == nil && slices.ContainsFunc(r.routes, func(o namedRoute) bool { return o.err == nil && o.name == nr.name }) {
		nr.err = fmt.Errorf("type %q is routed twice", nr.name)
	}
	r.routes = append(r.routes, nr)
	r.mu.Unlock()
	if nr.err != nil && r.e != nil {
		err := fmt.Errorf("acemq: router of %q: %w", r.e.queue, nr.err)
		r.e.setFault(err)
		r.e.conn.cfg.logger.Error("acemq: the router was given an invalid route; its Run fails", "queue", r.e.queue, "error", err)
	}
}

// Run consumes until ctx ends, exactly as Consumer.Run does. It fails at
// once when NewRouter met an error, when no type is routed, when a type is
// routed twice or a route is invalid, and after Close.
func (r *Router) Run(ctx context.Context) error {
	switch {
	case r == nil:
		return errors.New("acemq: Run was called on a nil Router")
	case r.e != nil && r.e.closed():
		return &closedError{who: r.e.who, queue: r.e.queue}
	case r.err != nil:
		return r.err
	}
	return r.e.run(ctx, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		table, err := r.table()
		if err != nil {
			return err
		}
		if r.undeclared {
			dctx, cancel := context.WithTimeout(ctx, declareTimeout)
			defer cancel()
			if err := r.e.declare(dctx); err != nil {
				return err
			}
			r.undeclared = false
		}
		r.e.routes = table // read only by the workers of this run
		return nil
	})
}

// Pause stops the router taking deliveries without stopping Run, exactly
// as Consumer.Pause does. It does nothing to a nil Router or one whose
// options were invalid (whose Run fails).
func (r *Router) Pause() {
	if r != nil && r.e != nil && r.err == nil {
		r.e.pauseNow()
	}
}

// Resume makes a paused router take deliveries again, exactly as
// Consumer.Resume does.
func (r *Router) Resume() {
	if r != nil && r.e != nil {
		r.e.resume()
	}
}

// table builds the routing table, or says what is wrong with the routes.
func (r *Router) table() (map[string]route, error) {
	if len(r.routes) == 0 {
		return nil, fmt.Errorf("acemq: router of %q has no routes (add them with Route)", r.e.queue)
	}
	table := make(map[string]route, len(r.routes))
	var errs []error
	for _, nr := range r.routes {
		if nr.err != nil { // Route found it, and faulted the router
			errs = append(errs, nr.err)
			continue
		}
		table[nr.name] = nr.r
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("acemq: router of %q: %w", r.e.queue, errors.Join(errs...))
	}
	return table, nil
}

// unmadeMode is the mode of a Router NewRouter could not make (an invalid
// option): it declares nothing and expects nothing, and whatever asks it
// to consume gets NewRouter's error. Run never gets that far (it returns
// the error first); the mode is there so that no method of such a Router
// meets a nil mode.
type unmadeMode struct{ err error }

func (m unmadeMode) topology() []Topology                 { return nil }
func (m unmadeMode) ladder() []string                     { return nil }
func (m unmadeMode) declare(context.Context) error        { return m.err }
func (m unmadeMode) checkDeclared(context.Context) error  { return m.err }
func (m unmadeMode) label() string                        { return "" }
func (m unmadeMode) subscribe(subscription) (bool, error) { return false, m.err }
func (m unmadeMode) checkKind(context.Context) error      { return m.err }
func (m unmadeMode) admit(transport.Delivery, *Envelope) (verdict, bool) {
	return verdict{outcome: OutcomeParked, reason: m.err.Error()}, false
}
func (m unmadeMode) held() []int          { return nil }
func (m unmadeMode) subscribed() []string { return nil }
