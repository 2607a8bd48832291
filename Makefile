# acemq — see README.md.
GO      ?= go
# Recipes run in bash, for pipefail: test-unit pipes go test into a filter
# and must keep go test's verdict.
SHELL   := /bin/bash
# Six modules, one workspace (go.work): the root, acemqtest/container,
# blob/gocloud, crypt/gocloud, console/browsertest and tools, modules of
# their own so that the root's users carry no Docker client, no cloud SDK,
# no browser driver and none of the tooling's dependencies in their module
# graph. ./... stops at a nested module, so every target that covers the
# whole tree names all six.
MODULES := ./... ./acemqtest/container/... ./blob/gocloud/... ./crypt/gocloud/... ./console/browsertest/... ./tools/...
PKGS    := $(shell $(GO) list $(MODULES) | grep -v -e /faulttest -e /clustertest)
FAULT   := ./tools/faulttest
CLUSTER := ./tools/clustertest
# The cluster `make cluster` starts, and the one the cluster tests start:
# own node names and ports, beside the machine's broker on 5672.
CLUSTERCMD := $(GO) run ./tools/cluster/cmd/cluster
FUZZTIME ?= 30s
# The heavy stages take this lock where flock exists, so that two runs on
# one machine (and one broker) do not hold a GiB each at the same time.
HEAVY   := $(shell command -v flock >/dev/null 2>&1 && echo flock /tmp/acemq-heavy.lock)

.PHONY: fence-experiment test broker-plugins staticcheck test-unit test-times test-large test-fault test-fence test-leftovers test-cluster test-container test-rabbitmq4 test-rabbitmq4-cluster vet lint tidy bench fuzz fuzz-short fuzz-seed quickstart cluster cluster-down

# The contributor's loop, every test in its short form: lint, the
# race-enabled suite under -short (the fuzz targets' seed corpora included;
# the heavy blob and hardening cases at a smaller size that keeps their
# promise), the broker fault tests on their own without the fencing
# experiment (they restart the broker, so nothing may run beside them), then
# the check that nothing was left behind. vet goes first: it compiles the
# race-enabled graph that staticcheck and test-unit then share. staticcheck
# runs beside test-unit, which waits on brokers more than it computes (at
# go test's default -parallel it kept two cores 58% busy on average); the fault tests and the
# leftovers check run one after the other whatever -j make was given. CI
# (.ci/run) then runs the stages that take long, in three lanes side by
# side: test-large and test-fence, test-rabbitmq4 and fuzz-short,
# test-cluster (docs/contributing.md says which to run for which change).
test: broker-plugins vet
	@$(MAKE) --no-print-directory -j2 staticcheck test-unit
	@$(MAKE) --no-print-directory -j1 test-fault test-leftovers

# Ordered consumers hash keys over RabbitMQ's consistent-hash exchange, a
# plugin that ships with the broker but is off by default: enabled here on a
# local broker (a remote one must have it already; its tests say so).
broker-plugins:
	@if command -v rabbitmq-plugins >/dev/null 2>&1; then \
	  rabbitmq-plugins -q enable rabbitmq_consistent_hash_exchange >/dev/null || \
	  echo "make: could not enable rabbitmq_consistent_hash_exchange; the ordered tests on RabbitMQ will fail"; \
	fi

# vet and staticcheck build with -race, as test-unit does, so a fresh
# clone compiles the dependency graph once for all three instead of once
# more for the checks.
vet:
	$(GO) vet -race $(MODULES)
	@test -z "$$(gofmt -l .)" || (echo "gofmt would change:"; gofmt -l .; exit 1)

# vet, gofmt and staticcheck, pinned; installed into .bin on first use.
STATICCHECK := .bin/staticcheck
lint: vet staticcheck

staticcheck: $(STATICCHECK)
	GOFLAGS="$$($(GO) env GOFLAGS) -race" $(STATICCHECK) $(MODULES)

$(STATICCHECK):
	GOBIN=$(CURDIR)/.bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

# go test -json through tools/testtimes: the output reads as go test's
# own (ok and FAIL lines, failing tests' output), the exit status is go
# test's, and the stream is kept in .bin/test-unit.json for test-times.
# -parallel 8: the parallel tests of a package mostly wait on a broker or
# a timer, and go test's default (GOMAXPROCS, 2 here) ran the root
# package's in 104 s against 38 s with 8.
test-unit:
	@mkdir -p .bin
	set -o pipefail; $(GO) test -race -short -count=1 -parallel 8 -json $(PKGS) | $(GO) run ./tools/testtimes -tee .bin/test-unit.json

# The 20 slowest tests of the last test-unit, and every package's time.
test-times:
	$(GO) run ./tools/testtimes -top 20 .bin/test-unit.json

# The cases test-unit runs smaller under -short, at full size, without
# -race (it would only multiply their I/O time; test-unit ran them with
# it): blob's 1 GiB payload under a 64 MiB heap, 200 payloads with
# retries, a consumer SIGKILLed mid-read of 64 MiB and the Counted store's
# conformance suite; hardtest's flood of 100,000 messages; the root's
# lateness promise on 10,000 delayed messages of 0-120 s (SPEC §20); the
# console's replay of a 10,000-message group through RabbitMQ. Under the
# heavy lock; then the leftovers check, as make test ends with, which also
# deletes the delay topology the lateness case declared.
LARGE_BLOB := ^(TestOneGiB|TestManyPayloadsWithRetries|TestKilledMidRead|TestCountedConformance)$$
LARGE_HARD := ^TestFloodDrainsWithFlatMemory$$
LARGE_ROOT := ^TestDelayLateness$$
LARGE_CONSOLE := ^TestReplayTenThousand$$
test-large:
	$(HEAVY) $(GO) test -count=1 -timeout 30m -run '$(LARGE_BLOB)' ./blob
	$(HEAVY) $(GO) test -count=1 -timeout 15m -run '$(LARGE_HARD)' ./tools/hardtest
	$(HEAVY) $(GO) test -count=1 -timeout 15m -run '$(LARGE_ROOT)' .
	$(HEAVY) $(GO) test -count=1 -timeout 15m -run '$(LARGE_CONSOLE)' ./console
	$(GO) run ./tools/leftovers

# go mod tidy for every module. go mod tidy ignores go.work, and the
# nested modules require the root at a placeholder version until the
# root is tagged (go.work's replace stands in for it here), so their tidy runs
# with that replace put in their go.mod for the while, and taken out again:
# the go.mod users resolve has none.
tidy:
	GOWORK=off $(GO) mod tidy
	for m in acemqtest/container blob/gocloud crypt/gocloud console/browsertest tools; do \
	  (cd $$m && \
	  $(GO) mod edit -replace github.com/acemq/acemq=$(CURDIR) && \
	  GOWORK=off $(GO) mod tidy; status=$$?; \
	  $(GO) mod edit -dropreplace github.com/acemq/acemq; exit $$status) || exit 1; \
	done

# The fault and cluster tests skip unless their variable is set, so that
# `go test ./...` never disturbs a broker; these targets set it.
# test-fault leaves out the fencing experiment (TestFencingOn...), which
# takes minutes of heartbeat timeouts: test-fence runs its short form, CI
# after make test.
test-fault:
	ACEMQ_FAULT_TESTS=1 $(GO) test -race -short -count=1 -p 1 -v -timeout 15m -skip '^TestFencingOn' $(FAULT)

test-fence:
	ACEMQ_FAULT_TESTS=1 $(GO) test -race -count=1 -p 1 -v -timeout 20m -run '^TestFencingOn' $(FAULT)

# Every test deletes what it declares: this fails when a queue or exchange
# with a test's name is left on the broker (it asks rabbitmqctl, so run it
# when no other test run shares the broker). -delete removes them. The
# delay topology, which tests share and so cannot delete, is deleted here
# when it is empty; a message left in it fails the check.
test-leftovers:
	$(GO) run ./tools/leftovers

# The cluster tests start acemq-t1..3@localhost on ports 5811-5813 and
# remove them when they end; the second command removes them even when the
# test binary itself died (a timeout, say).
test-cluster:
	ACEMQ_CLUSTER_TESTS=1 $(GO) test -race -count=1 -p 1 -v -timeout 15m $(CLUSTER); \
	status=$$?; $(CLUSTERCMD) -name acemq-t -port 5811 down; exit $$status

# The fencing experiment in full (issue 29 item 2, docs/ordering.md): five
# runs each of an instance frozen for 35 s and one cut off by a proxy for
# 60 s, with the default 10 s heartbeat, with and without fence-checked
# writes, on the machine's broker (about 25 minutes). make test-fence runs
# it once, short. For the test cluster:
# make fence-experiment FENCE_PKG=./tools/clustertest
FENCE_PKG ?= $(FAULT)
fence-experiment:
	ACEMQ_FAULT_TESTS=1 ACEMQ_CLUSTER_TESTS=1 ACEMQ_FENCE_RUNS=5 ACEMQ_FENCE_FREEZE=35s \
	ACEMQ_FENCE_PARTITION=60s ACEMQ_FENCE_HEARTBEAT=10s \
	$(GO) test -race -count=1 -v -timeout 60m -run 'TestFencingOn' $(FENCE_PKG)

# acemqtest's container fallback, run for real and offline: images built
# from Debian's packages, a Docker engine in a network namespace of its own
# (so the machine's broker and database are out of reach), and the
# acemqtest, root and outbox tests run through containers, then checked to
# leave none behind. Needs root; the first run downloads several hundred MB,
# so it is not part of `make test` or CI. See scripts/test-container.sh.
test-container:
	GO=$(GO) scripts/test-container.sh

# Every RabbitMQ test against a RabbitMQ 4.x node of its own beside the
# machine's broker (port 5682, its own epmd on 4382), from a Debian chroot
# cached in /var/cache/acemq-rabbitmq4-$(RABBITMQ4_SUITE): forky is 4.3,
# trixie 4.0. Then checks the tests used no deprecated broker feature.
# Needs root. See scripts/rabbitmq4.sh.
RABBITMQ4_SUITE ?= forky
test-rabbitmq4:
	GO=$(GO) RABBITMQ4_SUITE=$(RABBITMQ4_SUITE) scripts/rabbitmq4.sh suite

# The cluster tests on three 4.x nodes from the same chroot:
# acemq-u1..3@localhost on 5821-5823, their own epmd on 4383.
test-rabbitmq4-cluster:
	GO=$(GO) RABBITMQ4_SUITE=$(RABBITMQ4_SUITE) scripts/rabbitmq4.sh cluster

# A three-node cluster to try acemq against: acemq-n1..3@localhost on
# 5801-5803 (needs root and Debian's rabbitmq-server). It prints the URL
# list for ACEMQ_RABBITMQ_URL; `make cluster-down` removes it.
cluster:
	@$(CLUSTERCMD) up

cluster-down:
	@$(CLUSTERCMD) down

# Benchmarks: the engine on the memory transport, and acemq against raw
# amqp091-go on the local broker where it answers.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(PKGS)
	$(GO) run ./tools/benchcmp -n 20000 -consume-n 100000 -runs 5

# Each fuzz target for FUZZTIME (go test fuzzes one target at a time). New
# failing inputs land in the package's testdata/fuzz and then run as seeds.
# With a duration, Go 1.26 may end a clean run with a spurious "context
# deadline exceeded" (golang/go#75804): a real finding always writes a
# failing input and says so; FUZZTIME=200000x avoids the race.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzEnvelope$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzTopicMatch$$' -fuzztime $(FUZZTIME) ./transport/memory
	$(GO) test -run '^$$' -fuzz '^FuzzHeadersFromTable$$' -fuzztime $(FUZZTIME) ./transport/rabbitmq
	$(GO) test -run '^$$' -fuzz '^FuzzCheckTable$$' -fuzztime $(FUZZTIME) ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzGuardAgainstAMQP091$$' -fuzztime $(FUZZTIME) ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzRedact$$' -fuzztime $(FUZZTIME) ./internal/urls

# What CI fuzzes: each target for a few seconds beyond its seeds. Counts,
# not durations: Go 1.26's fuzz coordinator can fail a duration-bounded run
# with a spurious "context deadline exceeded" as its time runs out
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzEnvelope$$' -fuzztime 4000x .
	$(GO) test -run '^$$' -fuzz '^FuzzTopicMatch$$' -fuzztime 100000x ./transport/memory
	$(GO) test -run '^$$' -fuzz '^FuzzHeadersFromTable$$' -fuzztime 4000x ./transport/rabbitmq
	$(GO) test -run '^$$' -fuzz '^FuzzCheckTable$$' -fuzztime 20000x ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzGuardAgainstAMQP091$$' -fuzztime 2000x ./internal/wire
	$(GO) test -run '^$$' -fuzz '^FuzzRedact$$' -fuzztime 50000x ./internal/urls

# The fuzz targets' seed corpora only (f.Add and testdata/fuzz), no fuzzing:
# what test-unit already runs, on its own.
fuzz-seed:
	$(GO) test -race -count=1 -run '^Fuzz' . ./transport/memory ./transport/rabbitmq ./internal/wire ./internal/urls

quickstart:
	$(GO) run ./examples/quickstart
