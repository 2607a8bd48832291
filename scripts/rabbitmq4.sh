#!/usr/bin/env bash
# rabbitmq4.sh runs acemq's RabbitMQ tests against a RabbitMQ 4.x node of
# their own, beside the machine's broker (make test-rabbitmq4), or the
# cluster tests against three 4.x nodes (make test-rabbitmq4-cluster).
#
# 1. Builds a Debian root file system with debootstrap holding
#    rabbitmq-server from the suite $RABBITMQ4_SUITE (forky, Debian's
#    testing: RabbitMQ 4.3; trixie: 4.0) and keeps it in $RABBITMQ4_CACHE,
#    so a second run downloads nothing.
# 2. suite (the default): starts one node from that root in a chroot, with
#    its own node name, AMQP, distribution and epmd ports and its own data
#    and log directories (the machine's broker on 5672, 25672 and epmd's
#    4369 is never touched), enables rabbitmq_consistent_hash_exchange, and
#    runs the RabbitMQ tests of $PACKAGES against it (ACEMQ_RABBITMQ_URL
#    points there; ACEMQ_RABBITMQCTL is a rabbitmqctl that reaches it;
#    ACEMQ_RABBITMQ4=1 makes the tests that need 4.x run rather than skip).
#    Then the tests must have left no queue or exchange (tools/leftovers)
#    and `rabbitmqctl list_deprecated_features --used` must be empty.
#    cluster: runs the cluster tests (tools/clustertest) with
#    their nodes started from that root (ACEMQ_CLUSTER_ROOT), named
#    acemq-u1..3@localhost on 5821-5823.
#    root: builds the root file system, if it is not built, and stops
#    there (.ci/run builds it this way while make test runs).
#    run COMMAND...: starts the node as for suite and runs COMMAND with
#    ACEMQ_RABBITMQ_URL, ACEMQ_RABBITMQCTL and ACEMQ_RABBITMQ4 set, for a
#    look at the node by hand.
# 3. Removes the node, its epmd and its directories whatever happened.
#
# Needs root. Installs debootstrap when it is missing. The first run
# downloads about 60 MB of packages.
#
# Environment: RABBITMQ4_SUITE (forky), RABBITMQ4_CACHE
# (/var/cache/acemq-rabbitmq4-$RABBITMQ4_SUITE), REBUILD=1 to build the root
# again, DEBIAN_MIRROR (http://deb.debian.org/debian), GO (go), TEST_FLAGS
# (-race -short -count=1 -timeout 20m), PACKAGES (every package with RabbitMQ
# tests), RABBITMQ4_PORT (5682: AMQP; distribution 20000 above, epmd 4382).
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$PWD

MODE=${1:-suite}
[ $# = 0 ] || shift
SUITE=${RABBITMQ4_SUITE:-forky}
CACHE=${RABBITMQ4_CACHE:-/var/cache/acemq-rabbitmq4-$SUITE}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
GO=${GO:-go}
# -short: what differs between brokers shows at any size; the full-size
# cases (10,000 delayed messages over 120 s, a flood of 100,000) run on the
# machine's broker in make test-large, and here at the sizes make test uses.
TEST_FLAGS=${TEST_FLAGS:--race -short -count=1 -timeout 20m}
PACKAGES=${PACKAGES:-./transport/rabbitmq . ./outbox ./saga ./patterns ./acemqtest ./cmd/acemq ./tools/hardtest ./tools/quorumtest}
PORT=${RABBITMQ4_PORT:-5682}
DIST_PORT=$((PORT + 20000))
EPMD_PORT=4382
NODE=acemq-rmq4@localhost
ROOT=$CACHE/root

say() { printf 'rabbitmq4: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
stamp() { date -u +%H:%M:%S; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot)"
case $MODE in suite | cluster | root | run) ;; *) die "usage: $0 [suite | cluster | root | run COMMAND...]" ;; esac
[ "$MODE" != run ] || [ $# -gt 0 ] || die "run needs a command"

work=$(mktemp -d /tmp/acemq-rabbitmq4.XXXXXX)
mounted=()
node_dir= # the node's directory, as the chroot sees it

cleanup() {
	status=$?
	set +e
	if [ -n "$node_dir" ]; then
		stop_node
		rm -rf "${ROOT:?}$node_dir"
	fi
	kill_epmd
	for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || umount -l "$m"; done
	# A half-built root: only removed when nothing is mounted under it.
	if [ -d "$ROOT.tmp" ] && ! grep -q " $ROOT.tmp" /proc/mounts; then rm -rf "$ROOT.tmp"; fi
	rm -rf "$work"
	if [ "$status" = 0 ]; then say "passed"; else say "FAILED (exit $status)"; fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# in_root runs a command in the chroot with a clean environment.
in_root() {
	LANG=C.UTF-8 LC_ALL=C.UTF-8 chroot "$ROOT" /usr/bin/env -i \
		PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 LC_ALL=C.UTF-8 "$@"
}

mount_proc() {
	local root=$1
	if ! mountpoint -q "$root/proc"; then
		mount -t proc proc "$root/proc"
		mounted+=("$root/proc")
	fi
}

# --- the root file system ----------------------------------------------------

build_root() {
	command -v debootstrap >/dev/null || {
		say "$(stamp) installing debootstrap"
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >"$work/apt.log" 2>&1 ||
			{ tail -20 "$work/apt.log" >&2; die "apt-get install debootstrap failed"; }
	}
	local tmp=$ROOT.tmp
	grep -q " $tmp" /proc/mounts && die "$tmp has mounts left by an earlier run: unmount them first"
	rm -rf "$tmp"
	mkdir -p "$CACHE"
	# Older debootstraps have no script for the newest suites; they are
	# all made like sid.
	local script=/usr/share/debootstrap/scripts/$SUITE
	[ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
	say "$(stamp) debootstrap $SUITE into $tmp"
	debootstrap --variant=minbase "$SUITE" "$tmp" "$MIRROR" "$script" >"$work/debootstrap.log" 2>&1 ||
		{ tail -20 "$work/debootstrap.log" >&2; die "debootstrap $SUITE failed"; }
	# No service starts inside, ever.
	printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
	chmod +x "$tmp/usr/sbin/policy-rc.d"
	cp /etc/resolv.conf "$tmp/etc/resolv.conf"
	printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$tmp/etc/hosts"
	mount -t proc proc "$tmp/proc"
	mounted+=("$tmp/proc")
	say "$(stamp) installing rabbitmq-server from $SUITE"
	# A testing suite's Release file is not always re-signed before its
	# Valid-Until passes.
	LANG=C.UTF-8 LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive chroot "$tmp" sh -c \
		'apt-get -q -o Acquire::Check-Valid-Until=false update &&
		 apt-get install -y -q --no-install-recommends rabbitmq-server &&
		 apt-get clean' >"$work/install.log" 2>&1 ||
		{ tail -20 "$work/install.log" >&2; die "installing rabbitmq-server from $SUITE failed"; }
	umount "$tmp/proc"
	unset 'mounted[${#mounted[@]}-1]'
	rm -rf "$tmp/var/lib/apt/lists/"*
	: >"$tmp/etc/resolv.conf"
	rm -rf "$ROOT"
	mv "$tmp" "$ROOT"
}

# --- the node ----------------------------------------------------------------

# node_env is the environment of the node and of the rabbitmqctl that
# reaches it: everything RabbitMQ writes goes to $node_dir.
node_env() {
	printf '%s\n' \
		"HOME=$node_dir" \
		"RABBITMQ_NODENAME=$NODE" \
		"RABBITMQ_NODE_PORT=$PORT" \
		"RABBITMQ_DIST_PORT=$DIST_PORT" \
		"ERL_EPMD_PORT=$EPMD_PORT" \
		"RABBITMQ_MNESIA_BASE=$node_dir/mnesia" \
		"RABBITMQ_LOG_BASE=$node_dir/log" \
		"RABBITMQ_PID_FILE=$node_dir/pid" \
		"RABBITMQ_CONFIG_FILE=$node_dir/rabbitmq.conf" \
		"RABBITMQ_ADVANCED_CONFIG_FILE=$node_dir/advanced.config" \
		"RABBITMQ_CONF_ENV_FILE=$node_dir/rabbitmq-env.conf" \
		"RABBITMQ_ENABLED_PLUGINS_FILE=$node_dir/enabled_plugins" \
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+sbwt none +sbwtdcpu none +sbwtdio none"
}

ctl() {
	local env=()
	mapfile -t env < <(node_env)
	in_root "${env[@]}" /usr/lib/rabbitmq/bin/rabbitmqctl -n "$NODE" "$@"
}

start_node() {
	node_dir=/var/tmp/acemq-rabbitmq4.$$
	local d=$ROOT$node_dir
	mkdir -p "$d/mnesia" "$d/log"
	# guest is a loopback user, and the tests connect over 127.0.0.1.
	cat >"$d/rabbitmq.conf" <<-EOF
		listeners.tcp.local = 127.0.0.1:$PORT
		consumer_timeout = ${RABBITMQ4_CONSUMER_TIMEOUT:-1800000}
	EOF
	echo '[rabbitmq_consistent_hash_exchange].' >"$d/enabled_plugins"
	: >"$d/rabbitmq-env.conf"
	local env=()
	mapfile -t env < <(node_env)
	say "$(stamp) starting $NODE on 127.0.0.1:$PORT (distribution $DIST_PORT, epmd $EPMD_PORT)"
	in_root "${env[@]}" /usr/lib/rabbitmq/bin/rabbitmq-server -detached >"$work/server.log" 2>&1 ||
		{ cat "$work/server.log" >&2; die "rabbitmq-server did not start"; }
	# await_startup fails at once while the node has not registered with
	# epmd yet.
	for _ in $(seq 120); do
		ctl -q ping >/dev/null 2>&1 && break
		sleep 1
	done
	if ! ctl -q await_startup --timeout 120 >"$work/await.log" 2>&1; then
		cat "$work/await.log" >&2
		tail -40 "$d/log/"*.log >&2 2>/dev/null
		die "$NODE did not start (log in $d/log)"
	fi
	say "$(stamp) $NODE up: RabbitMQ $(ctl -q version 2>/dev/null), $(ctl -q eval 'erlang:system_info(otp_release).' 2>/dev/null | tr -d '"') Erlang/OTP"
}

stop_node() {
	local d=$ROOT$node_dir pid=
	[ -s "$d/pid" ] && pid=$(cat "$d/pid")
	ctl -q stop >/dev/null 2>&1 || true
	if [ -n "$pid" ]; then
		for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
		kill -9 "$pid" 2>/dev/null || true
	fi
}

# kill_epmd stops the epmd the nodes of this script started on their own
# port (never the machine's, on 4369).
kill_epmd() {
	local port
	for port in "$EPMD_PORT" "${CLUSTER_EPMD_PORT:-}"; do
		[ -n "$port" ] || continue
		in_root ERL_EPMD_PORT="$port" epmd -kill >/dev/null 2>&1 || true
	done
}

# rabbitmqctl_wrapper writes a rabbitmqctl for the tests, reaching the node.
rabbitmqctl_wrapper() {
	local w=$work/rabbitmqctl
	{
		echo '#!/bin/sh'
		printf 'exec chroot %q /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 LC_ALL=C.UTF-8' "$ROOT"
		node_env | while IFS= read -r kv; do printf ' %q' "$kv"; done
		printf ' /usr/lib/rabbitmq/bin/rabbitmqctl -n %q "$@"\n' "$NODE"
	} >"$w"
	chmod +x "$w"
	echo "$w"
}

# --- run -----------------------------------------------------------------------

t0=$SECONDS
if [ -n "${REBUILD:-}" ] || [ ! -x "$ROOT/usr/lib/rabbitmq/bin/rabbitmq-server" ]; then
	build_root
fi
version=$(chroot "$ROOT" dpkg-query -W -f '${Version}' rabbitmq-server)
erlang=$(chroot "$ROOT" dpkg-query -W -f '${Version}' erlang-base)
t_build=$SECONDS
say "$(stamp) root ready in $((t_build - t0))s: rabbitmq-server $version, erlang $erlang ($(du -shx "$ROOT" | cut -f1) in $ROOT)"
[ "$MODE" != root ] || exit 0
mount_proc "$ROOT"

say "$(stamp) building the tests"
if [ "$MODE" = run ]; then
	:
elif [ "$MODE" = cluster ]; then
	"$GO" test -race -count=1 -run '^$' ./tools/clustertest >/dev/null
else
	# shellcheck disable=SC2086
	"$GO" test $TEST_FLAGS -run '^$' $PACKAGES >/dev/null
fi
t_tests=$SECONDS

failed=0
if [ "$MODE" = run ]; then
	start_node
	ACEMQ_RABBITMQ_URL="amqp://guest:guest@127.0.0.1:$PORT/" ACEMQ_RABBITMQCTL=$(rabbitmqctl_wrapper) ACEMQ_RABBITMQ4=1 \
		"$@" || failed=1
elif [ "$MODE" = cluster ]; then
	CLUSTER_EPMD_PORT=4383
	say "$(stamp) cluster tests on three RabbitMQ $version nodes"
	ACEMQ_CLUSTER_TESTS=1 ACEMQ_REQUIRE_BROKER=1 ACEMQ_RABBITMQ4=1 \
		ACEMQ_CLUSTER_ROOT="$ROOT" ACEMQ_CLUSTER_NAME=acemq-u ACEMQ_CLUSTER_PORT=5821 \
		ACEMQ_CLUSTER_EPMD_PORT=$CLUSTER_EPMD_PORT \
		"$GO" test -race -count=1 -p 1 -v -timeout 15m ${CLUSTER_RUN:+-run "$CLUSTER_RUN"} ./tools/clustertest || failed=1
	ACEMQ_CLUSTER_ROOT="$ROOT" ACEMQ_CLUSTER_EPMD_PORT=$CLUSTER_EPMD_PORT \
		"$GO" run ./tools/cluster/cmd/cluster -name acemq-u -port 5821 down || true
else
	start_node
	ctlw=$(rabbitmqctl_wrapper)
	url="amqp://guest:guest@127.0.0.1:$PORT/"
	# One go test for every package, so that two run at once, as in make
	# test-unit on the machine's broker; go test prints each one's time.
	say "$(stamp) go test $PACKAGES (RabbitMQ $version)"
	# shellcheck disable=SC2086
	ACEMQ_RABBITMQ_URL=$url ACEMQ_RABBITMQCTL=$ctlw ACEMQ_RABBITMQ4=1 ACEMQ_REQUIRE_BROKER=1 \
		"$GO" test $TEST_FLAGS $PACKAGES || failed=1
	# Every test deletes what it declares; nothing else uses this node.
	ACEMQ_RABBITMQ_URL=$url ACEMQ_RABBITMQCTL=$ctlw ACEMQ_REQUIRE_BROKER=1 "$GO" run ./tools/leftovers || failed=1
	# What the runs used that RabbitMQ means to remove.
	used=$(ctl -q list_deprecated_features --used --formatter json 2>&1) || { printf '%s\n' "$used" >&2; die "list_deprecated_features failed"; }
	deprecated=0
	if [ "$(printf '%s' "$used" | tr -d '[:space:]')" != "[]" ]; then
		say "the tests use deprecated features of RabbitMQ $version:"
		printf '%s\n' "$used" >&2
		deprecated=1
	fi
	# --used lists what is in use now; the log keeps what was used and gone
	# (a transient queue a test declared and deleted, say).
	if grep -ih 'deprecated feature' "$ROOT$node_dir/log/"*.log >"$work/deprecated.log" 2>/dev/null; then
		say "the node logged the use of deprecated features:"
		sort -u "$work/deprecated.log" | cut -c1-400 >&2
		deprecated=1
	fi
	if [ "$deprecated" = 1 ]; then failed=1; else say "no deprecated feature used"; fi
fi
say "times: root $((t_build - t0))s, building the tests $((t_tests - t_build))s, tests $((SECONDS - t_tests))s, total $((SECONDS - t0))s"
exit $failed
