// Package hardtest is acemq's hardening suite: tests only, run against a
// real RabbitMQ found by acemqtest.RabbitMQ (skipped loudly when there is
// none, required in CI).
//
// It plays the hostile or careless producer with a raw amqp091-go client
// and checks that an acemq consumer parks or dead-letters every malformed
// message with a reason naming the problem and keeps running, with
// goroutines and heap back at their baseline afterwards. It also checks the
// bounds the engine promises (a stuck handler holds one worker, prefetch
// caps what is held in memory, a flood drains with flat memory), that
// stopping a consumer under load loses nothing and acks nothing unhandled,
// and that credentials never appear in errors, logs or health reports.
//
// docs/security.md states the trust model these tests check.
package hardtest
