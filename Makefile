# acemq — see README.md.
GO      ?= go
# Three modules, one workspace (go.work): the root, acemqtest/container and
# blob/gocloud, modules of their own so that the root's users carry no
# Docker client and no cloud SDK in their module graph. ./... stops at a
# nested module, so every target that covers the whole tree names all three.
MODULES := ./... ./acemqtest/container/... ./blob/gocloud/...
PKGS    := $(shell $(GO) list $(MODULES) | grep -v -e /faulttest -e /clustertest)
FAULT   := ./transport/rabbitmq/faulttest
CLUSTER := ./transport/rabbitmq/clustertest
# The cluster `make cluster` starts, and the one the cluster tests start:
# own node names and ports, beside the machine's broker on 5672.
CLUSTERCMD := $(GO) run ./internal/cluster/cmd/cluster
FUZZTIME ?= 30s

.PHONY: fence-experiment test broker-plugins test-unit test-fault test-leftovers test-cluster test-container test-rabbitmq4 test-rabbitmq4-cluster vet lint tidy bench fuzz fuzz-short fuzz-seed quickstart cluster cluster-down

# The full proof of the library on one broker: lint, the race-enabled suite
# (the fuzz targets' seed corpora included), then the broker fault tests on
# their own (they restart the broker, so nothing may run beside them), then
# the check that nothing was left behind. CI (.ci/run) then fuzzes beyond
# the seeds (fuzz-short: a third build of the standard library and the
# dependencies, instrumented for coverage) and runs test-cluster.
test: lint broker-plugins test-unit test-fault test-leftovers

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
lint: vet $(STATICCHECK)
	GOFLAGS="$$($(GO) env GOFLAGS) -race" $(STATICCHECK) $(MODULES)

$(STATICCHECK):
	GOBIN=$(CURDIR)/.bin $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2

test-unit:
	$(GO) test -race -count=1 $(PKGS)

# go mod tidy for every module. go mod tidy ignores go.work, and the
# nested modules require the root at a placeholder version until the
# root is tagged (go.work's replace stands in for it here), so their tidy runs
# with that replace put in their go.mod for the while, and taken out again:
# the go.mod users resolve has none.
tidy:
	GOWORK=off $(GO) mod tidy
	for m in acemqtest/container blob/gocloud; do \
	  (cd $$m && \
	  $(GO) mod edit -replace github.com/acemq/acemq=../.. && \
	  GOWORK=off $(GO) mod tidy; status=$$?; \
	  $(GO) mod edit -dropreplace github.com/acemq/acemq; exit $$status) || exit 1; \
	done

# The fault and cluster tests skip unless their variable is set, so that
# `go test ./...` never disturbs a broker; these targets set it.
test-fault:
	ACEMQ_FAULT_TESTS=1 $(GO) test -race -count=1 -p 1 -v -timeout 15m $(FAULT)

# Every test deletes what it declares: this fails when a queue or exchange
# with a test's name is left on the broker (it asks rabbitmqctl, so run it
# when no other test run shares the broker). -delete removes them.
test-leftovers:
	$(GO) run ./internal/leftovers

# The cluster tests start acemq-t1..3@localhost on ports 5811-5813 and
# remove them when they end; the second command removes them even when the
# test binary itself died (a timeout, say).
test-cluster:
	ACEMQ_CLUSTER_TESTS=1 $(GO) test -race -count=1 -p 1 -v -timeout 15m $(CLUSTER); \
	status=$$?; $(CLUSTERCMD) -name acemq-t -port 5811 down; exit $$status

# The fencing experiment in full (issue 29 item 2, docs/ordering.md): five
# runs each of an instance frozen for 35 s and one cut off by a proxy for
# 60 s, with the default 10 s heartbeat, with and without fence-checked
# writes, on the machine's broker (about 25 minutes). make test-fault runs
# it once, short. For the test cluster:
# make fence-experiment FENCE_PKG=./transport/rabbitmq/clustertest
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
	$(GO) run ./internal/benchcmp -n 20000 -consume-n 100000 -runs 5

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
