package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/acemq/acemq"
	"github.com/acemq/acemq/console"
	"github.com/acemq/acemq/outbox"
)

// shutdownGrace bounds how long the console waits for requests running
// when it is stopped; a replay in one stops between two messages.
const shutdownGrace = 10 * time.Second

// runConsole serves the console (package console) of the broker until the
// command is interrupted. It binds to loopback by default; on any other
// address it refuses to start without -token. It is read-only unless
// -write.
func runConsole(ctx context.Context, c *cli, args []string) error {
	fs := c.flags("console", "[QUEUE...]", "Serve a web page of the queues, their dead letters and blocked keys.")
	addr := fs.String("addr", "127.0.0.1:8080", "the `address` to listen on; anything but loopback needs -token")
	token := fs.String("token", "", "the `token` a browser must give (the printed link carries it); default $ACEMQ_CONSOLE_TOKEN")
	write := fs.Bool("write", false, "allow replay, edit, discard and release (read-only without it)")
	outboxDB := fs.String("outbox-db", "", "also show the dead rows of the outbox in this database (postgres://... or sqlite:PATH)")
	outboxTable := fs.String("outbox-table", outbox.DefaultTable, "the outbox `table` of -outbox-db")
	keysetFile := fs.String("keyset", "", "open sealed bodies in the message view with the Tink keyset in `FILE` (crypt.WriteKeyset's JSON); without it a sealed body shows only its key ID")
	queues, err := parse(fs, args)
	if err != nil {
		return err
	}
	if *token == "" {
		*token = c.getenv("ACEMQ_CONSOLE_TOKEN")
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return usagef("console: -addr %q is not host:port: %v", *addr, err)
	}
	if !loopbackHost(host) && *token == "" {
		return usagef("console: -addr %s is not a loopback address; give -token (or $ACEMQ_CONSOLE_TOKEN) so that only who has it can see the queues", *addr)
	}
	keys, err := readKeys(*keysetFile)
	if err != nil {
		return err
	}
	mq, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer mq.Close()

	logger := slog.New(slog.NewTextHandler(c.stderr, nil))
	opts := []console.Option{console.Queues(queues...), console.Logger(logger)}
	if keys != nil {
		opts = append(opts, console.Cipher(keys))
	}
	if *token != "" {
		opts = append(opts, console.Token(*token))
	}
	if *write {
		opts = append(opts, console.Write())
	}
	if *outboxDB != "" {
		db, dialect, err := c.database(ctx, "console", *outboxDB)
		if err != nil {
			return err
		}
		defer db.Close()
		o, err := outbox.New(db, dialect, outbox.Table(*outboxTable))
		if err != nil {
			return errors.New(scrub(err.Error(), *outboxDB))
		}
		defer o.Close()
		opts = append(opts, console.Outbox(o))
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("acemq: console: %w", err)
	}
	srv := &http.Server{Handler: console.Handler(mq, opts...), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	link := "http://" + ln.Addr().String() + "/"
	if *token != "" {
		link += "?token=" + *token
	}
	mode := "read-only"
	if *write {
		mode = "write enabled"
	}
	fmt.Fprintf(c.stdout, "acemq console of %s (%s) at %s\n", acemq.Redact(c.brokerURL()), mode, link)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("acemq: console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("acemq: console: %w", err)
	}
	fmt.Fprintln(c.stdout, "console stopped")
	return nil
}

// loopbackHost reports whether host names this machine only: localhost or
// a loopback IP. An empty host (":8080") is every interface.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
