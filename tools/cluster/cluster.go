// Package cluster starts a RabbitMQ cluster of its own on this machine,
// beside whatever broker already runs here: each node is a rabbitmq-server
// with its own node name, AMQP and distribution ports, data and log
// directories, run as the rabbitmq user so that the nodes and the CLI
// share that user's Erlang cookie. RabbitMQ clusters by node name over
// Erlang distribution, so three nodes on one machine are a real cluster:
// quorum queues replicate over them, and killing one is a real node loss.
//
// The fault tests use it, and so does `make cluster` (through
// ./tools/cluster/cmd/cluster) for a user who wants to try acemq against
// a cluster. It needs root, the rabbitmq user and Debian's rabbitmq-server,
// or, with Config.Root, a root file system holding them (another RabbitMQ
// version, run in a chroot: scripts/rabbitmq4.sh makes one).
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Where Debian's package puts RabbitMQ: the scripts themselves, not the
// /usr/sbin wrappers, which write the machine broker's startup log.
const (
	serverBin = "/usr/lib/rabbitmq/bin/rabbitmq-server"
	ctlBin    = "/usr/lib/rabbitmq/bin/rabbitmqctl"
	home      = "/var/lib/rabbitmq" // the rabbitmq user's, with its Erlang cookie
)

// Config says which nodes to run. The zero value is not usable: Name and
// BasePort are required so that two clusters (a user's `make cluster` and
// a test run) never share a node name or a port.
type Config struct {
	Name     string               // node i is {Name}{i}@localhost, e.g. acemq-n1@localhost
	BasePort int                  // node i listens for AMQP on BasePort+i-1 and for distribution 20000 above that
	Nodes    int                  // how many; 0 means 3
	Dir      string               // data and logs go to Dir/{node}; "" means /tmp/{Name}-cluster
	Logf     func(string, ...any) // progress; nil is quiet
	Timeout  time.Duration        // for one node to start; 0 means 90 s
	// Root, when set, is a root file system with rabbitmq-server and its
	// rabbitmq user: every node command runs in a chroot there, and Dir
	// is a path inside it.
	Root string
	// EpmdPort, when set, is the port of an epmd of the nodes' own
	// (ERL_EPMD_PORT), which Remove stops; 0 means the machine's, on
	// 4369. A root's newer Erlang needs its own.
	EpmdPort int
	// Conf are more lines for each node's rabbitmq.conf, such as
	// "frame_max = 16777216".
	Conf []string
}

// Environment variables FromEnv reads.
const (
	RootVar     = "ACEMQ_CLUSTER_ROOT"      // Config.Root
	NameVar     = "ACEMQ_CLUSTER_NAME"      // Config.Name
	PortVar     = "ACEMQ_CLUSTER_PORT"      // Config.BasePort
	EpmdPortVar = "ACEMQ_CLUSTER_EPMD_PORT" // Config.EpmdPort
)

// FromEnv returns cfg with what the environment variables above set in
// place of its fields, so that a test run or a tool can be pointed at
// nodes of another RabbitMQ version, with names and ports of their own.
func FromEnv(cfg Config) (Config, error) {
	if v := os.Getenv(RootVar); v != "" {
		cfg.Root = v
	}
	if v := os.Getenv(NameVar); v != "" {
		cfg.Name = v
	}
	for _, f := range []struct {
		name string
		to   *int
	}{{PortVar, &cfg.BasePort}, {EpmdPortVar, &cfg.EpmdPort}} {
		if v := os.Getenv(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 65535 {
				return cfg, fmt.Errorf("cluster: %s=%q is not a port", f.name, v)
			}
			*f.to = n
		}
	}
	return cfg, nil
}

// host is path, inside the nodes' root file system, as this process sees it.
func (c Config) host(path string) string { return filepath.Join(c.Root, path) }

func (c Config) withDefaults() Config {
	if c.Nodes <= 0 {
		c.Nodes = 3
	}
	if c.Dir == "" {
		c.Dir = filepath.Join(os.TempDir(), c.Name+"-cluster")
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Timeout <= 0 {
		c.Timeout = 90 * time.Second
	}
	return c
}

// Cluster is a running set of nodes joined into one cluster.
type Cluster struct {
	cfg   Config
	Nodes []*Node
}

// Node is one RabbitMQ node of a Cluster.
type Node struct {
	Name     string // e.g. acemq-n1@localhost
	Port     int    // AMQP
	DistPort int    // Erlang distribution
	dir      string
	cfg      Config

	mu sync.Mutex // serialises Start, Stop and Kill
}

// Available says why a cluster cannot be started here, or nil.
func Available() error { return available(Config{}) }

func available(cfg Config) error {
	if os.Geteuid() != 0 {
		return errors.New("cluster: must run as root (the nodes run as the rabbitmq user)")
	}
	if cfg.Root == "" {
		if _, err := user.Lookup("rabbitmq"); err != nil {
			return fmt.Errorf("cluster: no rabbitmq user: %w", err)
		}
	}
	for _, bin := range []string{serverBin, ctlBin, "/usr/sbin/runuser"} {
		if _, err := os.Stat(cfg.host(bin)); err != nil {
			return fmt.Errorf("cluster: %s is missing (install Debian's rabbitmq-server)", cfg.host(bin))
		}
	}
	return nil
}

// nodes lays out cfg's nodes without starting anything.
func nodes(cfg Config) []*Node {
	out := make([]*Node, cfg.Nodes)
	for i := range out {
		name := fmt.Sprintf("%s%d", cfg.Name, i+1)
		out[i] = &Node{
			Name:     name + "@localhost",
			Port:     cfg.BasePort + i,
			DistPort: cfg.BasePort + i + 20000,
			dir:      filepath.Join(cfg.Dir, name),
			cfg:      cfg,
		}
	}
	return out
}

// Start removes whatever an earlier run of the same Config left, starts
// every node, joins nodes 2 and up to node 1 and returns once each accepts
// AMQP connections. On failure it removes what it started.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Name == "" || cfg.BasePort <= 0 {
		return nil, errors.New("cluster: Config needs a Name and a BasePort")
	}
	if err := available(cfg); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Cluster{cfg: cfg, Nodes: nodes(cfg)}
	_ = c.Remove()
	for _, n := range c.Nodes {
		if err := portFree(n.Port); err != nil {
			return nil, err
		}
		if err := n.prepare(); err != nil {
			_ = c.Remove()
			return nil, err
		}
	}
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = n.Start(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = c.Remove()
		return nil, err
	}
	first := c.Nodes[0]
	for _, n := range c.Nodes[1:] {
		cfg.Logf("cluster: %s joins %s", n.Name, first.Name)
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", first.Name}, {"start_app"}} {
			if _, err := n.Ctl(ctx, args...); err != nil {
				_ = c.Remove()
				return nil, err
			}
		}
		if err := n.await(ctx); err != nil {
			_ = c.Remove()
			return nil, err
		}
	}
	cfg.Logf("cluster: %d nodes up: %s", len(c.Nodes), c.URLs())
	return c, nil
}

func portFree(port int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return fmt.Errorf("cluster: port %d is taken: %w", port, err)
	}
	return ln.Close()
}

// URLs is the comma-separated list of the nodes' AMQP URLs (guest/guest).
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// Node returns the node whose AMQP address is addr (host:port), or nil.
func (c *Cluster) Node(addr string) *Node {
	for _, n := range c.Nodes {
		if strings.HasSuffix(addr, ":"+strconv.Itoa(n.Port)) || strings.Contains(addr, ":"+strconv.Itoa(n.Port)+"/") {
			return n
		}
	}
	return nil
}

// Remove kills every node of the cluster and deletes its directories. It
// works from a fresh process too (see Down), and on nodes already gone.
func (c *Cluster) Remove() error {
	var errs []error
	for _, n := range c.Nodes {
		n.mu.Lock()
		n.killLocked()
		n.mu.Unlock()
		if err := os.RemoveAll(c.cfg.host(n.dir)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(c.cfg.host(c.cfg.Dir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if c.cfg.EpmdPort > 0 {
		// The nodes' own epmd, now that none of them is left. Never the
		// machine's: that one is on another port.
		_ = c.cfg.command(context.Background(), "env", "ERL_EPMD_PORT="+strconv.Itoa(c.cfg.EpmdPort), "epmd", "-kill").Run()
	}
	return errors.Join(errs...)
}

// Attach returns the Cluster cfg describes, started earlier (by another
// process, say), without starting or checking anything.
func Attach(cfg Config) *Cluster {
	cfg = cfg.withDefaults()
	return &Cluster{cfg: cfg, Nodes: nodes(cfg)}
}

// Down removes the nodes cfg names, whoever started them.
func Down(cfg Config) error {
	cfg = cfg.withDefaults()
	return (&Cluster{cfg: cfg, Nodes: nodes(cfg)}).Remove()
}

// URL is the node's AMQP URL.
func (n *Node) URL() string {
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port)
}

func (n *Node) prepare() error {
	dir := n.cfg.host(n.dir)
	for _, d := range []string{"mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	conf := fmt.Sprintf("listeners.tcp.local = 127.0.0.1:%d\nloopback_users = none\n", n.Port)
	for _, line := range n.cfg.Conf {
		conf += line + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	// The consistent-hash exchange is what ordered consumers partition
	// keys with (SPEC §16); it ships with rabbitmq-server.
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[rabbitmq_consistent_hash_exchange].\n"), 0o644); err != nil {
		return err
	}
	// In the root the rabbitmq user is the root's own, with its own id.
	out, err := n.cfg.command(context.Background(), "chown", "-R", "rabbitmq:rabbitmq", n.cfg.Dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cluster: chown %s: %v: %s", n.cfg.Dir, err, out)
	}
	return nil
}

func (n *Node) env() []string {
	env := []string{
		"HOME=" + home,
		"RABBITMQ_NODENAME=" + n.Name,
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(n.DistPort),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(n.dir, "log"),
		"RABBITMQ_PID_FILE=" + filepath.Join(n.dir, "pid"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(n.dir, "enabled_plugins"),
		// Schedulers that sleep rather than spin when idle: four nodes
		// share two cores here.
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=+sbwt none +sbwtdcpu none +sbwtdio none",
	}
	if n.cfg.EpmdPort > 0 {
		env = append(env, "ERL_EPMD_PORT="+strconv.Itoa(n.cfg.EpmdPort))
	}
	return env
}

// command is name with args, run in the nodes' root when there is one.
func (c Config) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if c.Root == "" {
		return exec.CommandContext(ctx, name, args...)
	}
	return exec.CommandContext(ctx, "chroot", append([]string{c.Root, name}, args...)...)
}

// run runs a RabbitMQ script as the rabbitmq user with the node's
// environment, bounded by ctx.
func (n *Node) run(ctx context.Context, bin string, args ...string) (string, error) {
	cmdArgs := append([]string{"-u", "rabbitmq", "--", "env"}, n.env()...)
	cmdArgs = append(cmdArgs, bin)
	cmdArgs = append(cmdArgs, args...)
	cmd := n.cfg.command(ctx, "/usr/sbin/runuser", cmdArgs...)
	if n.cfg.Root == "" {
		cmd.Dir = home // chroot starts in the root's /
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cluster: %s %s on %s: %v: %s", filepath.Base(bin), strings.Join(args, " "), n.Name, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Ctl runs rabbitmqctl against the node.
func (n *Node) Ctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return n.run(ctx, ctlBin, append([]string{"-n", n.Name}, args...)...)
}

// Start starts the node (again) and returns once it accepts AMQP
// connections. A node that is already running is left as it is.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pid() > 0 && alive(n.pid()) {
		return nil
	}
	n.cfg.Logf("cluster: starting %s on port %d", n.Name, n.Port)
	if _, err := n.run(ctx, serverBin, "-detached"); err != nil {
		return err
	}
	return n.await(ctx)
}

// await waits for the node to run its application and accept AMQP.
func (n *Node) await(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	var last error
	for {
		if _, err := n.run(ctx, ctlBin, "-n", n.Name, "await_startup", "--timeout", "60"); err == nil {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(n.Port), time.Second)
			if err == nil {
				_ = c.Close()
				return nil
			}
			last = err
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s did not start: %w (log in %s)", n.Name, last, n.cfg.host(filepath.Join(n.dir, "log")))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Stop stops the node gracefully (rabbitmqctl stop), as a rolling upgrade
// does.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cfg.Logf("cluster: stopping %s", n.Name)
	_, err := n.run(ctx, ctlBin, "-n", n.Name, "stop")
	return err
}

// Kill ends the node with SIGKILL, as a crash or an OOM kill would, and
// returns once the process is gone.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cfg.Logf("cluster: killing %s (SIGKILL)", n.Name)
	if n.pid() <= 0 {
		return fmt.Errorf("cluster: %s has no pid file", n.Name)
	}
	n.killLocked()
	return nil
}

// Running reports whether the node's process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pid() > 0 && alive(n.pid())
}

func (n *Node) pid() int {
	b, err := os.ReadFile(n.cfg.host(filepath.Join(n.dir, "pid")))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// killLocked SIGKILLs the node's beam and waits (briefly) for it to go.
// Besides the pid file it looks for any process started with the node's
// name, so a node whose pid file was lost is not left behind.
func (n *Node) killLocked() {
	pids := map[int]bool{}
	if p := n.pid(); p > 0 {
		pids[p] = true
	}
	short := strings.TrimSuffix(n.Name, "@localhost")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		for i, a := range args {
			if (a == "-sname" || a == "-name") && i+1 < len(args) && (args[i+1] == n.Name || args[i+1] == short) {
				pids[pid] = true
			}
		}
	}
	for pid := range pids {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	_ = os.Remove(n.cfg.host(filepath.Join(n.dir, "pid")))
}

// alive reports whether pid is a live process (a zombie counts as gone).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

// QueueLeader returns the name of the node holding the leader of a quorum
// queue (or the home node of a classic one), as the broker reports it.
func (c *Cluster) QueueLeader(ctx context.Context, queue string) (string, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		out, err := n.Ctl(ctx, "list_queues", "-q", "--no-table-headers", "name", "leader", "pid")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == queue {
				leader := f[1]
				if leader == "" || leader == "''" {
					// A classic queue has no leader; its pid names its node.
					if len(f) >= 3 {
						leader = strings.Trim(strings.SplitN(f[2], ".", 2)[0], "<")
					}
				}
				return leader, nil
			}
		}
		return "", fmt.Errorf("cluster: queue %q not found on %s", queue, n.Name)
	}
	return "", errors.New("cluster: no node is running")
}
