#!/usr/bin/env bash
# test-container.sh runs acemqtest's container fallback for real, as a user
# on an offline machine would meet it (make test-container).
#
# 1. Builds the two images acemqtest starts from Debian's packages: a minimal
#    bookworm made with debootstrap, with rabbitmq-server or postgresql, and
#    an entrypoint that runs the server in the foreground with its log on
#    stdout; `docker import` tags them with the names acemqtest uses
#    (RabbitMQImage and PostgresImage, or $ACEMQ_RABBITMQ_IMAGE and
#    $ACEMQ_POSTGRES_IMAGE). The root file systems are kept as tarballs in
#    $ACEMQ_CONTAINER_CACHE, so a second run downloads nothing.
# 2. Starts a Docker engine in a network namespace of its own, with its data,
#    exec root, pidfile and socket in a temporary directory, and empty file
#    systems over the few fixed paths dockerd writes to, in a mount namespace
#    of its own: nothing of the machine's Docker setup, network or services
#    is touched, and inside the namespace 127.0.0.1:5672 and :5432 are
#    empty, so acemqtest must fall back to containers.
# 3. Runs the tests of acemqtest/container and the acemqtest, root and
#    outbox tests inside the namespace, built with the tag
#    acemqtest_container and an -overlay that adds to each of the last
#    three a container_link_test.go importing acemqtest/container (a module
#    of its own, which the root module does not require: the workspace,
#    go.work, resolves it), with
#    ACEMQ_RABBITMQ_URL and ACEMQ_POSTGRES_URL unset, the reaper off
#    (TESTCONTAINERS_RYUK_DISABLED=true: no image registry is reachable) and
#    ACEMQ_REQUIRE_BROKER=1 (a skip would prove nothing), one package at a
#    time, and checks after each that no container is left.
# 4. Stops the engine and removes the namespace and the directory, whatever
#    happened.
#
# Needs root. Installs docker.io and debootstrap from Debian's packages when
# they are missing. Not part of `make test` or CI: the first run downloads
# several hundred MB of packages.
#
# Environment: GO (go), TEST_FLAGS (-race -count=1 -timeout 20m),
# PACKAGES (./acemqtest/container ./acemqtest . ./outbox), ACEMQ_CONTAINER_CACHE
# (/var/cache/acemq-test-container), REBUILD=1 to rebuild the images,
# DEBIAN_MIRROR (debootstrap's default when unset).
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$PWD

GO=${GO:-go}
TEST_FLAGS=${TEST_FLAGS:--race -count=1 -timeout 20m}
PACKAGES=${PACKAGES:-./acemqtest/container ./acemqtest . ./outbox}
# The tag leaves out acemqtest's check that no container hook is linked;
# the overlay (made below, once $work exists) links the container fallback
# into the test binaries of the root module's packages, which would skip
# (or, here, fail) without it.
TAGS=-tags=acemqtest_container
CACHE=${ACEMQ_CONTAINER_CACHE:-/var/cache/acemq-test-container}
SUITE=bookworm

say() { printf 'test-container: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }
stamp() { date -u +%H:%M:%S; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, ip netns, dockerd)"

# The image names acemqtest starts when no variable overrides them: read
# from its source, so this script and the package never disagree.
default_image() {
	sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\"\\(.*\\)\".*/\\1/p" "$repo/acemqtest/images.go"
}
RABBIT_IMAGE=${ACEMQ_RABBITMQ_IMAGE:-$(default_image RabbitMQImage)}
PG_IMAGE=${ACEMQ_POSTGRES_IMAGE:-$(default_image PostgresImage)}
[ -n "$RABBIT_IMAGE" ] && [ -n "$PG_IMAGE" ] || die "cannot read the default image names from acemqtest/images.go"

work=$(mktemp -d /tmp/acemq-test-container.XXXXXX)
ns=acemq-tc-$$
dockerd_pid=
mounted=()
made=()

cleanup() {
	status=$?
	set +e
	if [ -n "$dockerd_pid" ] && kill -0 "$dockerd_pid" 2>/dev/null; then
		# Containers first, so the engine does not leave their shims behind.
		ids=$(docker -H "unix://$work/docker.sock" ps -aq 2>/dev/null)
		[ -z "$ids" ] || docker -H "unix://$work/docker.sock" rm -f $ids >/dev/null 2>&1
		kill "$dockerd_pid"
		for _ in $(seq 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
		kill -9 "$dockerd_pid" 2>/dev/null
	fi
	for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null; done
	# The engine's own mounts (overlay layers, its containerd's state).
	grep -o " $work[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
	ip netns del "$ns" 2>/dev/null
	for d in "${made[@]}"; do rmdir "$d" 2>/dev/null; done
	rm -rf "$work"
	if [ "$status" = 0 ]; then say "passed"; else say "FAILED (exit $status)"; fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- tools -------------------------------------------------------------------

install_tools() {
	local missing=()
	command -v dockerd >/dev/null || missing+=(docker.io)
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	[ ${#missing[@]} = 0 ] && return
	say "$(stamp) installing ${missing[*]}"
	# The machine's own Docker service must not start: refuse every service
	# start during the install, unless a policy is already in place.
	local policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		policy=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >"$work/apt.log" 2>&1 ||
		{ tail -20 "$work/apt.log" >&2; [ -z "$policy" ] || rm -f /usr/sbin/policy-rc.d; die "apt-get install ${missing[*]} failed"; }
	[ -z "$policy" ] || rm -f /usr/sbin/policy-rc.d
}

# --- images ------------------------------------------------------------------

# chroot_run runs a command in the root file system $1, with /proc mounted
# and every service start refused.
chroot_run() {
	local root=$1
	shift
	mount -t proc proc "$root/proc"
	mounted+=("$root/proc")
	local status=0
	LANG=C.UTF-8 LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive chroot "$root" "$@" || status=$?
	umount "$root/proc"
	unset 'mounted[${#mounted[@]}-1]'
	return $status
}

# rootfs builds a bookworm root file system with the given packages and
# writes it as a tarball to $2.
rootfs() {
	local name=$1 tarball=$2
	shift 2
	local root=$work/rootfs-$name
	say "$(stamp) debootstrap $SUITE for $name"
	# shellcheck disable=SC2086 # an empty mirror is debootstrap's default
	debootstrap --variant=minbase "$SUITE" "$root" ${DEBIAN_MIRROR:-} >"$work/debootstrap-$name.log" 2>&1 ||
		{ tail -20 "$work/debootstrap-$name.log" >&2; die "debootstrap for $name failed"; }
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod +x "$root/usr/sbin/policy-rc.d"
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	# PostgreSQL's package would create a cluster at install time; the
	# entrypoint makes one when the container starts instead.
	mkdir -p "$root/etc/postgresql-common"
	echo "create_main_cluster = false" >"$root/etc/postgresql-common/createcluster.conf"
	say "$(stamp) installing $* for $name"
	chroot_run "$root" sh -c 'apt-get update -q && apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confold "$@" && apt-get clean' \
		sh "$@" >"$work/install-$name.log" 2>&1 ||
		{ tail -20 "$work/install-$name.log" >&2; die "installing $* for $name failed"; }
	rm -f "$root/usr/sbin/policy-rc.d"
	rm -rf "$root/var/lib/apt/lists/"*
	: >"$root/etc/resolv.conf"
	"setup_$name" "$root"
	mkdir -p "$(dirname "$tarball")"
	tar -C "$root" --numeric-owner --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* -cf "$tarball.tmp" .
	mv "$tarball.tmp" "$tarball"
	rm -rf "$root"
}

setup_rabbitmq() {
	local root=$1
	# guest may log in over the port mapping (it is not loopback). No plugin
	# is enabled here: acemqtest enables the consistent-hash exchange in the
	# containers it starts, whatever the image.
	cat >"$root/etc/rabbitmq/rabbitmq.conf" <<-'EOF'
		loopback_users = none
		listeners.tcp.default = 5672
	EOF
	cat >"$root/usr/local/bin/acemq-entrypoint" <<-'EOF'
		#!/bin/sh
		# Runs RabbitMQ in the foreground as its own user, logging to stdout.
		set -e
		exec 2>&1
		export HOME=/var/lib/rabbitmq RABBITMQ_LOGS=-
		chown -R rabbitmq:rabbitmq /var/lib/rabbitmq /var/log/rabbitmq
		exec setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups /usr/lib/rabbitmq/bin/rabbitmq-server
	EOF
	chmod +x "$root/usr/local/bin/acemq-entrypoint"
}

setup_postgres() {
	local root=$1
	# Creates the cluster, the user and the database that POSTGRES_USER,
	# POSTGRES_PASSWORD and POSTGRES_DB name (the variables the official
	# image reads, and acemqtest sets) on first start, then runs the server
	# in the foreground, logging to stdout.
	cat >"$root/usr/local/bin/acemq-entrypoint" <<-'EOF'
		#!/bin/sh
		set -eu
		exec 2>&1
		bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
		data=/var/lib/postgresql/data
		user=${POSTGRES_USER:-postgres}
		db=${POSTGRES_DB:-$user}
		as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
		mkdir -p "$data" /var/run/postgresql
		chown postgres:postgres "$data" /var/run/postgresql
		chmod 700 "$data"
		if [ ! -s "$data/PG_VERSION" ]; then
			auth=trust
			pwfile=
			if [ -n "${POSTGRES_PASSWORD:-}" ]; then
				auth=scram-sha-256
				pwfile=/var/run/postgresql/pw
				printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
				chown postgres "$pwfile"
			fi
			as_pg "$bin/initdb" -D "$data" --username="$user" --auth-local=trust --auth-host="$auth" ${pwfile:+--pwfile="$pwfile"}
			rm -f /var/run/postgresql/pw
			echo "host all all all $auth" >>"$data/pg_hba.conf"
			as_pg "$bin/pg_ctl" -D "$data" -o "-c listen_addresses=''" -w start
			if [ "$db" != postgres ]; then
				as_pg "$bin/psql" -v ON_ERROR_STOP=1 -h /var/run/postgresql -U "$user" -d postgres -c "CREATE DATABASE \"$db\""
			fi
			as_pg "$bin/pg_ctl" -D "$data" -m fast -w stop
		fi
		exec setpriv --reuid=postgres --regid=postgres --init-groups "$bin/postgres" -D "$data" -c listen_addresses='*'
	EOF
	chmod +x "$root/usr/local/bin/acemq-entrypoint"
}

# --- the engine ----------------------------------------------------------------

start_dockerd() {
	say "$(stamp) starting dockerd in network namespace $ns"
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	echo '{}' >"$work/daemon.json"
	# dockerd and its containerd also write to fixed paths of the machine
	# (/etc/docker/key.json, /run/docker/plugins, /run/containerd/s): they
	# get empty file systems of their own in a private mount namespace, on
	# mount points made here when missing and removed again afterwards.
	for d in /etc/docker /run/docker /run/containerd; do
		[ -d "$d" ] || { mkdir -p "$d"; made+=("$d"); }
	done
	# nsenter, not `ip netns exec`: the latter remounts /sys and hides the
	# cgroup mounts dockerd needs. Each command execs the next, so $! is
	# dockerd's process.
	nsenter --net="/var/run/netns/$ns" unshare --mount --propagation private sh -c '
		for d in /etc/docker /run/docker /run/containerd; do
			mount -t tmpfs -o mode=0700 acemq-test-container "$d" || exit 1
		done
		exec "$@"' sh dockerd \
		--config-file "$work/daemon.json" \
		--data-root "$work/data" --exec-root "$work/exec" \
		--pidfile "$work/dockerd.pid" -H "unix://$work/docker.sock" \
		>"$work/dockerd.log" 2>&1 &
	dockerd_pid=$!
	for _ in $(seq 120); do
		docker -H "unix://$work/docker.sock" info >/dev/null 2>&1 && return
		kill -0 "$dockerd_pid" 2>/dev/null || break
		sleep 0.5
	done
	tail -30 "$work/dockerd.log" >&2
	die "dockerd did not start"
}

import_image() {
	local tarball=$1 image=$2 port=$3
	docker -H "unix://$work/docker.sock" import \
		--change 'ENTRYPOINT ["/usr/local/bin/acemq-entrypoint"]' \
		--change "EXPOSE $port" \
		--change 'ENV LANG=C.UTF-8' \
		"$tarball" "$image" >/dev/null
	say "$(stamp) imported $image"
}

left() { docker -H "unix://$work/docker.sock" ps -aq; }

# --- run -----------------------------------------------------------------------

t0=$SECONDS
install_tools
for name in rabbitmq postgres; do
	if [ -n "${REBUILD:-}" ] || [ ! -s "$CACHE/$name.tar" ]; then
		case $name in
		rabbitmq) rootfs rabbitmq "$CACHE/rabbitmq.tar" rabbitmq-server ;;
		postgres) rootfs postgres "$CACHE/postgres.tar" postgresql ;;
		esac
	fi
done
t_build=$SECONDS
say "$(stamp) images ready in $((t_build - t0))s ($(du -sh "$CACHE" | cut -f1) in $CACHE)"

start_dockerd
import_image "$CACHE/rabbitmq.tar" "$RABBIT_IMAGE" 5672
import_image "$CACHE/postgres.tar" "$PG_IMAGE" 5432
t_engine=$SECONDS

# link_overlay writes an overlay that adds a container_link_test.go, the
# blank import of acemqtest/container, to each package of PACKAGES outside
# that module, and adds it to TAGS. The root module cannot hold such a file:
# it would have to require the container module, and every user of acemq
# would carry testcontainers in their module graph again.
link_overlay() {
	local overlay=$work/link-overlay.json sep= dir name path
	printf '{"Replace": {' >"$overlay"
	# shellcheck disable=SC2086
	while read -r path dir name; do
		[ "$path" = github.com/acemq/acemq/acemqtest/container ] && continue
		printf '// Added by scripts/test-container.sh (an -overlay).\npackage %s_test\n\nimport _ "github.com/acemq/acemq/acemqtest/container"\n' \
			"$name" >"$work/link-$name.go"
		printf '%s"%s/container_link_test.go": "%s"' "$sep" "$dir" "$work/link-$name.go" >>"$overlay"
		sep=,
	done < <("$GO" list -f '{{.ImportPath}} {{.Dir}} {{.Name}}' $PACKAGES)
	printf '}}\n' >>"$overlay"
	TAGS="$TAGS -overlay=$overlay"
}
link_overlay

# Build the test binaries outside the namespace (the module proxy is
# reachable here), so that the runs below only run.
say "$(stamp) building the tests"
# shellcheck disable=SC2086
"$GO" test $TAGS $TEST_FLAGS -run '^$' $PACKAGES >/dev/null
t_build_tests=$SECONDS

since=$(date +%s)
failed=0
for pkg in $PACKAGES; do
	say "$(stamp) go test $TAGS $TEST_FLAGS $pkg"
	p0=$SECONDS
	# shellcheck disable=SC2086
	env -u ACEMQ_RABBITMQ_URL -u ACEMQ_POSTGRES_URL \
		DOCKER_HOST="unix://$work/docker.sock" \
		TESTCONTAINERS_RYUK_DISABLED=true ACEMQ_REQUIRE_BROKER=1 \
		GOPROXY=off \
		nsenter --net="/var/run/netns/$ns" "$GO" test $TAGS $TEST_FLAGS "$pkg" || failed=1
	started=$(docker -H "unix://$work/docker.sock" events --since "$since" --until "$(date +%s)" \
		--filter type=container --filter event=start --format '{{.From}}' | sort | uniq -c | tr '\n' ';')
	since=$(date +%s)
	say "$(stamp) $pkg: $((SECONDS - p0))s; containers started: ${started:-none}"
	if [ -n "$(left)" ]; then
		docker -H "unix://$work/docker.sock" ps -a >&2
		say "containers left behind after $pkg"
		failed=1
	fi
done
# With testcontainers' defaults the reaper is on, and its image cannot be
# pulled here: the test must skip, saying why and how to run offline, and
# leave nothing behind (it used to leave a container in state Created).
say "$(stamp) with the reaper on: expecting a skip that names TESTCONTAINERS_RYUK_DISABLED"
p0=$SECONDS
out=$(env -u ACEMQ_RABBITMQ_URL -u ACEMQ_POSTGRES_URL -u TESTCONTAINERS_RYUK_DISABLED -u ACEMQ_REQUIRE_BROKER \
	DOCKER_HOST="unix://$work/docker.sock" GOPROXY=off \
	nsenter --net="/var/run/netns/$ns" "$GO" test $TAGS -count=1 -v -run '^TestRabbitMQAnswers$' ./acemqtest 2>&1) || true
printf '%s\n' "$out" | grep -A4 'acemqtest: no RabbitMQ' >&2 || true
if ! printf '%s\n' "$out" | grep -q -- '--- SKIP: TestRabbitMQAnswers' ||
	! printf '%s\n' "$out" | grep -q 'TESTCONTAINERS_RYUK_DISABLED=true'; then
	printf '%s\n' "$out" | tail -30 >&2
	say "the reaper-on run did not skip with the offline hint"
	failed=1
fi
if [ -n "$(left)" ]; then
	docker -H "unix://$work/docker.sock" ps -a >&2
	say "containers left behind by the reaper-on run"
	failed=1
fi
say "$(stamp) reaper on: $((SECONDS - p0))s"

say "times: tools and images $((t_build - t0))s, engine and import $((t_engine - t_build))s, building the tests $((t_build_tests - t_engine))s, tests $((SECONDS - t_build_tests))s"
exit $failed
