// Package console is a web page for the queues an acemq service uses: every
// queue family at a glance, dead letters and parked messages grouped by
// type and reason, one message whole, and the actions that fix them:
// replay (one, a selection or a group, at a rate), edit and replay,
// discard, and the release of an ordered queue's blocked keys.
//
// Handler returns it as an http.Handler, for the acemq console command or
// for a service's own mux:
//
//	mux.Handle("/console/", http.StripPrefix("/console", console.Handler(conn, console.Queues("orders"))))
//
// # Safe by default
//
// Without Auth or Token the console serves loopback clients only. It is
// read-only unless given Write; every write needs the page's CSRF token in
// a header and passes http.CrossOriginProtection. Message bodies and
// headers are shown as text, never as HTML, under a Content-Security-Policy
// that allows the console's own script only.
//
// # Nothing lost by looking
//
// Reading a queue takes its messages in one pass on a consumer of its own,
// cancels it, and puts every message back before the request ends: nothing
// is acked, and the queue keeps its order (a quorum queue of more than one
// read's 20,000 does not: see docs/console.md). A read says when the
// broker's count changed under it. Replay is
// patterns.Replay, as acemq replay runs it: each message is confirmed on
// its target before it is acked on its source; release is
// acemq.ReleaseKey, as acemq keys release runs it.
package console
