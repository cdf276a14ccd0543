package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/internal/keyslot"
)

// NumSlots is the number of Redis Cluster hash slots.
const NumSlots = keyslot.NumSlots

// clusterStartTimeout bounds StartCluster: six processes, the create
// handshake and the wait until every node and a client agree.
const clusterStartTimeout = 60 * time.Second

// ClusterConfig shapes a cluster started by StartClusterWith. Zero fields
// take the defaults documented on them.
type ClusterConfig struct {
	// Masters is the number of masters; default 3 (the least Redis
	// Cluster accepts).
	Masters int
	// Replicas is the number of replicas per master; default 1. Use -1
	// for none.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a master may be
	// unreachable before it is failed over; default 2s.
	NodeTimeout time.Duration
	// PartialCoverage sets cluster-require-full-coverage no, so the
	// healthy masters keep serving their slots while a failed master's
	// slots are uncovered. By default (Redis's default) every node
	// refuses all commands with CLUSTERDOWN from the moment a master is
	// flagged failed until its replica has taken over.
	PartialCoverage bool
}

// Cluster is a Redis Cluster of redis-server processes on loopback ports,
// each in its own temporary directory, with no persistence. It is stopped
// and its files removed when the test that started it ends. Its methods
// are safe for concurrent use.
type Cluster struct {
	t     testing.TB
	cfg   ClusterConfig
	root  string
	procs []*proc // every node the harness started, in port order of creation
}

// ClusterNode is one node as the cluster sees it (CLUSTER NODES).
type ClusterNode struct {
	ID       string
	Addr     string // 127.0.0.1:port
	Master   bool
	MasterID string // a replica's master; "" for a master
	Failed   bool   // flagged fail or fail? by the node asked
	Slots    []SlotRange
}

// SlotRange is a range of hash slots, both ends included.
type SlotRange struct{ Start, End int }

// NumSlots returns the number of slots n owns.
func (n ClusterNode) NumSlots() int {
	total := 0
	for _, r := range n.Slots {
		total += r.End - r.Start + 1
	}
	return total
}

// Owns reports whether n owns slot.
func (n ClusterNode) Owns(slot int) bool {
	for _, r := range n.Slots {
		if r.Start <= slot && slot <= r.End {
			return true
		}
	}
	return false
}

// StartCluster starts a Redis Cluster of three masters with one replica
// each (see StartClusterWith). It fails the test when redis-server or
// redis-cli is not on PATH or the cluster does not form.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterConfig{})
}

// StartClusterWith starts a cluster shaped by cfg: one redis-server per
// node (cluster-enabled, its own directory and free port, the cluster bus
// on another free port), joined with redis-cli --cluster create. It
// returns once every node reports cluster_state:ok, all of them agree on
// which master owns every slot, every replica's link to its master is up,
// and a fresh ClusterClient routes a key to every master without a
// redirect. Everything is stopped and removed when the test ends.
//
// A cluster is always made of processes started here: REDIS_ADDR and
// Docker serve the single-server harness (Start) only. The cluster needs
// redis-server and redis-cli on PATH (scripts/ensure-redis.sh).
func StartClusterWith(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	if cfg.Masters == 0 {
		cfg.Masters = 3
	}
	switch {
	case cfg.Replicas == 0:
		cfg.Replicas = 1
	case cfg.Replicas < 0:
		cfg.Replicas = 0
	}
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = 2 * time.Second
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%v: a cluster needs %s on PATH (%v)", ErrNoRedis, bin, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	c, err := startCluster(ctx, cfg)
	if c != nil {
		c.t = t
		t.Cleanup(c.close)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	root, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, fmt.Errorf("redistest: temp dir: %w", err)
	}
	c := &Cluster{cfg: cfg, root: root}
	n := cfg.Masters * (1 + cfg.Replicas)
	for i := 0; i < n; i++ {
		p, err := c.startNode(ctx, i)
		if err != nil {
			return c, err
		}
		c.procs = append(c.procs, p)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.Replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.waitStable(ctx, true); err != nil {
		return c, err
	}
	return c, nil
}

// startNode starts node i in its own directory, retrying with other
// ports when one was taken between the probe and the bind.
func (c *Cluster) startNode(ctx context.Context, i int) (*proc, error) {
	dir := filepath.Join(c.root, fmt.Sprintf("node%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	coverage := "yes"
	if c.cfg.PartialCoverage {
		coverage = "no"
	}
	return startOnFreePorts(ctx, dir, 2, fmt.Sprintf("cluster node %d", i), func(ports []int) ([]string, error) {
		// A failed attempt may have left the node's cluster state.
		os.Remove(filepath.Join(dir, "nodes.conf"))
		return []string{
			"--port", strconv.Itoa(ports[0]),
			"--cluster-port", strconv.Itoa(ports[1]),
			"--bind", "127.0.0.1",
			"--dir", dir,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(c.cfg.NodeTimeout.Milliseconds(), 10),
			"--cluster-require-full-coverage", coverage,
			// A replica may take over however long it was cut off: tests
			// kill masters on purpose and want the failover.
			"--cluster-replica-validity-factor", "0",
			// Replicas sync at once, not after the default 5 s wait for
			// more replicas to share a diskless transfer.
			"--repl-diskless-sync-delay", "0",
			"--save", "",
			"--appendonly", "no",
			"--daemonize", "no",
			"--loglevel", "warning",
			"--logfile", "redis.log",
		}, nil
	})
}

// startOnFreePorts starts a process in dir on n free ports, with the
// arguments args gives for them (ports[0] is the one clients use). A port
// found free may be taken by the time the process binds it, so a failed
// start is retried on new ports, up to five times. what names the process
// in the error.
func startOnFreePorts(ctx context.Context, dir string, n int, what string, args func(ports []int) ([]string, error)) (*proc, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		ports, err := freePorts(n)
		if err != nil {
			lastErr = err
			continue
		}
		a, err := args(ports)
		if err != nil {
			return nil, err
		}
		p, err := startProc(ctx, dir, ports[0], a...)
		if err != nil {
			lastErr = err
			continue
		}
		return p, nil
	}
	return nil, fmt.Errorf("redistest: %s: %w", what, lastErr)
}

// Addrs returns the address of every node the harness started, dead or
// alive, for redis.ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string { return addrsOf(c.procs, false) }

// LiveAddrs returns the addresses of the nodes that were not killed.
func (c *Cluster) LiveAddrs() []string { return addrsOf(c.procs, true) }

// addrsOf returns the addresses of procs, or of those alive.
func addrsOf(procs []*proc, liveOnly bool) []string {
	addrs := make([]string, 0, len(procs))
	for _, p := range procs {
		if !liveOnly || p.alive() {
			addrs = append(addrs, p.Addr)
		}
	}
	return addrs
}

// ClientOptions returns options of a ClusterClient of the cluster, to
// adjust before redis.NewClusterClient. ContextTimeoutEnabled is set, as
// leasequota asks of its clients, so that a call's context deadline also
// bounds its socket reads and writes.
func (c *Cluster) ClientOptions() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true}
}

// Client returns a new ClusterClient of the cluster, closed when the test
// ends. Tests that check for goroutine leaks should close their clients
// themselves (redis.NewClusterClient(c.ClientOptions())).
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(c.ClientOptions())
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// NodeClient returns a client of the single node at addr (no cluster
// routing), closed when the test ends: for INFO, CLUSTER and DBSIZE.
func (c *Cluster) NodeClient(addr string) *redis.Client {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// Nodes returns the cluster's nodes as the first live node sees them.
func (c *Cluster) Nodes(ctx context.Context) ([]ClusterNode, error) {
	var errs []error
	for _, addr := range c.LiveAddrs() {
		nodes, err := clusterNodes(ctx, addr)
		if err == nil {
			return nodes, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("redistest: no live node answered CLUSTER NODES: %w", errors.Join(errs...))
}

// Masters returns the masters that own slots and are not flagged failed,
// as the first live node sees them, sorted by their first slot.
func (c *Cluster) Masters(ctx context.Context) ([]ClusterNode, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var masters []ClusterNode
	for _, n := range nodes {
		if n.Master && !n.Failed && len(n.Slots) > 0 {
			masters = append(masters, n)
		}
	}
	sort.Slice(masters, func(i, j int) bool { return masters[i].Slots[0].Start < masters[j].Slots[0].Start })
	return masters, nil
}

// KillNode kills the node at addr with SIGKILL (no shutdown save, no
// goodbye to the cluster) and waits until its port refuses connections.
// The cluster notices after NodeTimeout; WaitHealthy waits for the
// failover.
func (c *Cluster) KillNode(addr string) error {
	for _, p := range c.procs {
		if p.Addr == addr {
			return p.kill()
		}
	}
	return fmt.Errorf("redistest: KillNode: no node at %s", addr)
}

// WaitHealthy waits, polling, until the live nodes form a healthy
// cluster again: each reports cluster_state:ok, all agree that every slot
// is owned by the same live master, every live replica's link to its
// master is up, and a fresh ClusterClient routes a key to every master
// without a redirect. After KillNode of a master that includes the
// failover to its replica.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return c.waitStable(ctx, false)
}

func (c *Cluster) waitStable(ctx context.Context, all bool) error {
	return poll(ctx, 25*time.Millisecond, "cluster not healthy", func(ctx context.Context) error {
		return c.checkStable(ctx, all)
	})
}

// checkStable returns nil when the live nodes form a healthy cluster (see
// WaitHealthy); with all, every node the harness started must be in it
// with its configured role count.
func (c *Cluster) checkStable(ctx context.Context, all bool) error {
	live := c.LiveAddrs()
	if len(live) == 0 {
		return errors.New("no live node")
	}
	isLive := map[string]bool{}
	for _, a := range live {
		isLive[a] = true
	}
	var owners string // slot map as the first node sees it
	var masters []ClusterNode
	for _, addr := range live {
		info, err := nodeInfo(ctx, addr, "cluster", "info")
		if err != nil {
			return err
		}
		if v := field(info, "cluster_state"); v != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", addr, v)
		}
		nodes, err := clusterNodes(ctx, addr)
		if err != nil {
			return err
		}
		var owned int
		var b strings.Builder
		var ms []ClusterNode
		nm, nr := 0, 0
		for _, n := range nodes {
			if !n.Master {
				if isLive[n.Addr] {
					nr++
				}
				continue
			}
			if len(n.Slots) == 0 {
				continue
			}
			if n.Failed || !isLive[n.Addr] {
				return fmt.Errorf("%s: slots of %s are owned by a dead or failed master", addr, n.Addr)
			}
			nm++
			ms = append(ms, n)
			owned += n.NumSlots()
			for _, r := range n.Slots {
				fmt.Fprintf(&b, "%d-%d=%s ", r.Start, r.End, n.ID)
			}
		}
		if owned != NumSlots {
			return fmt.Errorf("%s: %d of %d slots owned by live masters", addr, owned, NumSlots)
		}
		if all && (nm != c.cfg.Masters || nr != c.cfg.Masters*c.cfg.Replicas) {
			return fmt.Errorf("%s: sees %d masters and %d replicas, want %d and %d", addr, nm, nr, c.cfg.Masters, c.cfg.Masters*c.cfg.Replicas)
		}
		sig := sortedFields(b.String())
		if owners == "" {
			owners, masters = sig, ms
		} else if sig != owners {
			return fmt.Errorf("nodes disagree on slot owners: %s vs %s", owners, sig)
		}
		repl, err := nodeInfo(ctx, addr, "info", "replication")
		if err != nil {
			return err
		}
		if field(repl, "role") == "slave" && field(repl, "master_link_status") != "up" {
			return fmt.Errorf("%s: replica link to its master is %s", addr, field(repl, "master_link_status"))
		}
	}
	return c.checkRouting(ctx, masters)
}

// checkRouting checks that a fresh ClusterClient reaches every master
// with a key of one of its slots, without a redirect.
func (c *Cluster) checkRouting(ctx context.Context, masters []ClusterNode) error {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.LiveAddrs(), MaxRedirects: -1, MaxRetries: -1})
	defer cl.Close()
	for _, m := range masters {
		key := KeyInSlot(m.Slots[0].Start)
		if err := cl.Exists(ctx, key).Err(); err != nil {
			return fmt.Errorf("cluster client routing to %s: %w", m.Addr, err)
		}
	}
	return nil
}

// Reshard moves slots hash slots from the master with ID from to the one
// with ID to, with redis-cli --cluster reshard, keys and all, while the
// cluster serves. redis-cli moves the source's lowest slots first. It
// returns when redis-cli has finished.
func (c *Cluster) Reshard(ctx context.Context, from, to string, slots int) error {
	live := c.LiveAddrs()
	if len(live) == 0 {
		return errors.New("redistest: Reshard: no live node")
	}
	args := []string{"--cluster", "reshard", live[0],
		"--cluster-from", from, "--cluster-to", to,
		"--cluster-slots", strconv.Itoa(slots), "--cluster-yes"}
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, tail(out, 2000))
	}
	return nil
}

// close kills every node and removes the cluster's files.
func (c *Cluster) close() { stopAll(c.root, c.procs) }

// stopAll kills procs, in parallel, and removes their root directory.
func stopAll(root string, procs []*proc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.kill()
		}()
	}
	wg.Wait()
	os.RemoveAll(root)
}

// KeyInSlot returns a short key whose hash slot is slot.
func KeyInSlot(slot int) string {
	for i := 0; ; i++ {
		k := "k" + strconv.Itoa(i)
		if int(keyslot.Of(k)) == slot {
			return k
		}
	}
}

// nodeInfo runs a command returning text (CLUSTER INFO, INFO x) on one node.
func nodeInfo(ctx context.Context, addr string, args ...string) (string, error) {
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer cl.Close()
	a := make([]interface{}, len(args))
	for i, s := range args {
		a[i] = s
	}
	s, err := cl.Do(ctx, a...).Text()
	if err != nil {
		return "", fmt.Errorf("%s: %s: %w", addr, strings.Join(args, " "), err)
	}
	return s, nil
}

// clusterNodes asks the node at addr for CLUSTER NODES.
func clusterNodes(ctx context.Context, addr string) ([]ClusterNode, error) {
	text, err := nodeInfo(ctx, addr, "cluster", "nodes")
	if err != nil {
		return nil, err
	}
	return parseClusterNodes(text)
}

// parseClusterNodes parses CLUSTER NODES:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
func parseClusterNodes(text string) ([]ClusterNode, error) {
	var nodes []ClusterNode
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("redistest: bad CLUSTER NODES line %q", sc.Text())
		}
		addr := f[1]
		if i := strings.IndexAny(addr, "@,"); i >= 0 {
			addr = addr[:i]
		}
		n := ClusterNode{ID: f[0], Addr: addr}
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "master":
				n.Master = true
			case "fail", "fail?":
				n.Failed = true
			}
		}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being migrated or imported
				continue
			}
			lo, hi, found := strings.Cut(s, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("redistest: bad slot range %q in CLUSTER NODES", s)
			}
			n.Slots = append(n.Slots, SlotRange{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, sc.Err()
}

// field returns the value of "name:value" in INFO-style text.
func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func sortedFields(s string) string {
	f := strings.Fields(s)
	sort.Strings(f)
	return strings.Join(f, " ")
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// proc is one redis-server process started by the cluster or sentinel
// harness, in its own directory, on a loopback port.
type proc struct {
	Addr string
	Port int
	Dir  string

	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been reaped

	mu     sync.Mutex
	killed bool
}

// startProc starts redis-server in dir with args (which must set the port
// to port), and waits until it answers PING or exits.
func startProc(ctx context.Context, dir string, port int, args ...string) (*proc, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoRedis, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{
		Addr:   net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Port:   port,
		Dir:    dir,
		cmd:    cmd,
		exited: make(chan struct{}),
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	readyCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- waitReady(readyCtx, p.Addr, startTimeout) }()
	select {
	case <-p.exited:
		cancel()
		<-ready
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		return nil, fmt.Errorf("redistest: redis-server on port %d exited at start: %s", port, log)
	case err := <-ready:
		if err != nil {
			p.kill()
			return nil, err
		}
	}
	return p, nil
}

// kill sends SIGKILL (no shutdown save, no goodbye to the cluster) and
// waits until the process is reaped and its port refuses connections.
func (p *proc) kill() error {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(startTimeout):
		return fmt.Errorf("redistest: redis-server %s not reaped %v after SIGKILL", p.Addr, startTimeout)
	}
	return waitClosed(p.Addr)
}

// alive reports whether the process runs and was not killed by the harness.
func (p *proc) alive() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.killed {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// freePorts returns n distinct free loopback ports. Ports are probed while
// all n listeners are open, so they differ from each other; another
// process may still take one before redis-server binds it, which callers
// handle by retrying.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// poll calls f every interval until it returns nil or ctx is done; then
// it returns f's last error, wrapped with what.
func poll(ctx context.Context, interval time.Duration, what string, f func(context.Context) error) error {
	var err error
	for {
		if err = f(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}
