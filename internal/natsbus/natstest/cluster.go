package natstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvrouter/kvrouter/internal/poll"
)

// ClusterName is the NATS cluster name of a Cluster's nodes.
const ClusterName = "kvrouter-test"

// GlobalAccount is the account of clients of a server without accounts
// configured: the account of every stream a Cluster's clients create.
const GlobalAccount = "$G"

// Cluster is a NATS cluster of in-process nodes on 127.0.0.1, each with
// JetStream on its own store, routed to every other node: what a
// deployment that outgrew one server runs. Each node can be stopped and
// started again on the same client and cluster ports with the same store,
// or cut off from the others (Isolate). Its methods are safe for
// concurrent use.
//
// Every route goes through a TCP relay of its own, one per ordered pair
// of nodes (node i dials node j's cluster port through links[i][j]): a
// partition cuts relays, and leaves every server and client connection
// running, as a network partition does. nats-server has no API to drop a
// route from outside, and a route closed inside the server would be
// dialled again within milliseconds. The nodes advertise an unreachable
// cluster address, so that the gossip which completes a cluster's mesh
// cannot open a direct route around the relays.
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	nodes []*ClusterNode
	links [][]*link // links[i][j]: node i's routes to node j; nil on the diagonal
}

// ClusterNode is one node of a Cluster.
type ClusterNode struct {
	c           *Cluster
	name, dir   string
	port, route int // client and cluster ports, kept across restarts (-1 before the first start)
	srv         *natsserver.Server
	k           int
	isolated    bool
}

// unreachableRoute is the cluster address every node advertises (see
// Cluster): nothing listens on port 1 of the loopback interface.
const unreachableRoute = "127.0.0.1:1"

// StartCluster starts n nodes (n ≥ 1) and waits until the cluster has
// formed (WaitFormed). Every node is stopped at cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("cluster of %d nodes", n)
	}
	c := &Cluster{t: t}
	for i := range n {
		// Ports -1: free ones at the first start, kept across restarts.
		c.nodes = append(c.nodes, &ClusterNode{c: c, k: i, name: fmt.Sprintf("n%d", i+1), dir: t.TempDir(), port: -1, route: -1})
	}
	c.links = make([][]*link, n)
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			nd.Stop()
		}
		for _, row := range c.links {
			for _, l := range row {
				if l != nil {
					l.close()
				}
			}
		}
	})
	for i := range n {
		c.links[i] = make([]*link, n)
		for j := range n {
			if i == j {
				continue
			}
			l, err := newLink()
			if err != nil {
				t.Fatal(err)
			}
			c.links[i][j] = l
		}
	}
	for _, nd := range c.nodes {
		nd.Start()
	}
	c.WaitFormed(30 * time.Second)
	return c
}

// Nodes returns the nodes in start order.
func (c *Cluster) Nodes() []*ClusterNode { return c.nodes }

// Node returns the i-th node (from 0).
func (c *Cluster) Node(i int) *ClusterNode { return c.nodes[i] }

// URLs is every node's client URL, comma-separated: what a router, agent
// or mocker is given as --nats-url.
func (c *Cluster) URLs() string {
	var us []string
	for _, nd := range c.nodes {
		us = append(us, nd.URL())
	}
	return strings.Join(us, ",")
}

// routes is node k's route URLs: its relays to every other node.
func (c *Cluster) routes(k int) []*url.URL {
	var rs []*url.URL
	for j, l := range c.links[k] {
		if j != k {
			rs = append(rs, &url.URL{Scheme: "nats-route", Host: l.ln.Addr().String()})
		}
	}
	return rs
}

// Formed reports whether every running node that is not isolated has a
// route to every other such node, sees JetStream's meta group as current,
// and exactly one of them is the meta leader, which sees them all online;
// the detail says what is missing.
func (c *Cluster) Formed() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var up []*ClusterNode
	for _, nd := range c.nodes {
		if nd.srv != nil && !nd.isolated {
			up = append(up, nd)
		}
	}
	if len(up) == 0 {
		return false, "no node running"
	}
	leaders := 0
	for _, nd := range up {
		rz, err := nd.srv.Routez(nil)
		if err != nil {
			return false, fmt.Sprintf("%s: routez: %v", nd.name, err)
		}
		peers := map[string]bool{}
		for _, r := range rz.Routes {
			peers[r.RemoteName] = true
		}
		for _, other := range up {
			if other != nd && !peers[other.name] {
				return false, fmt.Sprintf("%s has no route to %s", nd.name, other.name)
			}
		}
		if !nd.srv.JetStreamIsCurrent() {
			return false, nd.name + ": JetStream meta group not current"
		}
		if nd.srv.JetStreamIsLeader() {
			leaders++
			// The leader places new streams only on peers it has fresh
			// stats of ("no suitable peers for placement" otherwise).
			if online := nd.srv.JetStreamClusterPeers(); len(online) < len(up) {
				return false, fmt.Sprintf("meta leader %s sees %d of %d nodes online", nd.name, len(online), len(up))
			}
		}
	}
	if leaders != 1 {
		return false, fmt.Sprintf("%d meta leaders", leaders)
	}
	return true, ""
}

// WaitFormed polls Formed until it holds, failing the test with what is
// missing after d.
func (c *Cluster) WaitFormed(d time.Duration) {
	c.t.Helper()
	poll.UntilState(c.t, d, c.Formed, "the NATS cluster to form")
}

// MetaLeader returns the node that leads JetStream's meta group, or nil.
func (c *Cluster) MetaLeader() *ClusterNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.nodes {
		if nd.srv != nil && !nd.isolated && nd.srv.JetStreamIsLeader() {
			return nd
		}
	}
	return nil
}

// StreamLeader returns the node that leads stream (in GlobalAccount; a
// KV bucket's stream is "KV_<bucket>", an object store's "OBJ_<bucket>"),
// or nil.
func (c *Cluster) StreamLeader(stream string) *ClusterNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range c.nodes {
		if nd.srv != nil && !nd.isolated && nd.srv.JetStreamIsStreamLeader(GlobalAccount, stream) {
			return nd
		}
	}
	return nil
}

// NodeByURL returns the node whose client URL is u (as nats.Conn's
// ConnectedUrl reports it), or nil.
func (c *Cluster) NodeByURL(u string) *ClusterNode {
	for _, nd := range c.nodes {
		if nd.URL() == u {
			return nd
		}
	}
	return nil
}

// Name is the node's server name ("n1", "n2", ...).
func (n *ClusterNode) Name() string { return n.name }

// URL is the node's client URL, the same across restarts.
func (n *ClusterNode) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// Server is the running server, nil while stopped.
func (n *ClusterNode) Server() *natsserver.Server {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.srv
}

// Running reports whether the node is started (isolated or not).
func (n *ClusterNode) Running() bool { return n.Server() != nil }

// Isolate cuts the node off from the others, as a network partition
// would: every relay between it and another node is cut (connections
// closed, new ones refused). The node and its clients keep running: its
// clients stay connected to it, core NATS works among them only, and its
// JetStream has no quorum. It returns once the node has no route left.
// Heal ends it.
func (n *ClusterNode) Isolate() {
	n.c.t.Helper()
	n.c.mu.Lock()
	n.isolated = true
	n.c.mu.Unlock()
	n.setLinks(true)
	poll.Until(n.c.t, 10*time.Second, func() bool {
		s := n.Server()
		return s == nil || s.NumRoutes() == 0
	}, n.name+" without routes (a route bypassed the relays?)")
}

// Heal ends an isolation: the relays carry routes again, which the nodes
// dial again by themselves (WaitFormed waits for them).
func (n *ClusterNode) Heal() {
	n.setLinks(false)
	n.c.mu.Lock()
	n.isolated = false
	n.c.mu.Unlock()
}

// Isolated reports whether the node is cut off from the others.
func (n *ClusterNode) Isolated() bool {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	return n.isolated
}

func (n *ClusterNode) setLinks(down bool) {
	for j := range n.c.nodes {
		if j != n.k {
			n.c.links[n.k][j].set(down)
			n.c.links[j][n.k].set(down)
		}
	}
}

// Start starts a stopped node on its ports with its store, routed to the
// others (through the relays, cut while it is isolated); it does not wait
// for the cluster to form (WaitFormed does).
func (n *ClusterNode) Start() {
	n.c.t.Helper()
	n.c.mu.Lock()
	running := n.srv != nil
	n.c.mu.Unlock()
	if running {
		return
	}
	var s *natsserver.Server
	var err error
	// A restarted node binds the same ports; the old sockets may take a
	// moment to let go.
	for deadline := time.Now().Add(10 * time.Second); ; {
		o := &natsserver.Options{ServerName: n.name, Host: "127.0.0.1", Port: n.port, NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: n.dir,
			Cluster: natsserver.ClusterOpts{Name: ClusterName, Host: "127.0.0.1", Port: n.route, Advertise: unreachableRoute},
			Routes:  n.c.routes(n.k)}
		if s, err = natsserver.NewServer(o); err == nil {
			go s.Start()
			if s.ReadyForConnections(readyTimeout) {
				break
			}
			s.Shutdown()
			s.WaitForShutdown()
			err = fmt.Errorf("nats node %s not ready", n.name)
		}
		if time.Now().After(deadline) {
			n.c.t.Fatalf("starting nats node %s: %v", n.name, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	n.c.mu.Lock()
	n.srv = s
	n.c.mu.Unlock()
	if n.port == -1 { // the first start, before StartCluster returns: no reader yet
		n.port, n.route = s.Addr().(*net.TCPAddr).Port, s.ClusterAddr().Port
	}
	for j := range n.c.nodes {
		if j != n.k {
			n.c.links[j][n.k].setTarget(fmt.Sprintf("127.0.0.1:%d", n.route))
		}
	}
}

// Crash stops the node as a crash would, as far as the rest of the
// cluster can tell: its relays are cut first, so the leaderships it hands
// over on a clean shutdown (nats-server steps its raft leaders down
// before it exits) never reach the others, who have to wait out an
// election timeout (4–9 s by default) for each group it led. Its clients
// see their connections close. Start brings it back, routed again.
func (n *ClusterNode) Crash() {
	n.c.t.Helper()
	n.setLinks(true)
	poll.Until(n.c.t, 10*time.Second, func() bool {
		s := n.Server()
		return s == nil || s.NumRoutes() == 0
	}, n.name+" without routes before the crash")
	n.Stop()
	if !n.Isolated() {
		n.setLinks(false) // the others dial it again, and find nothing there
	}
}

// Stop shuts the node down cleanly (its raft leaders step down first;
// its clients see their connections close) and waits for it; stopping a
// stopped node does nothing.
func (n *ClusterNode) Stop() {
	n.c.mu.Lock()
	s := n.srv
	n.srv = nil
	n.c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// StreamCurrent reports whether stream (in the account js uses) has a
// leader and every one of its other replicas is current, asking over js
// (the stream's leader answers); the detail says what is missing. After
// a node restarts, a fault on another node is a single fault only once
// this holds again for every replicated stream.
func StreamCurrent(ctx context.Context, js jetstream.JetStream, stream string) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return false, fmt.Sprintf("stream %s: %v", stream, err)
	}
	info := st.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return false, "stream " + stream + " has no leader"
	}
	if want := info.Config.Replicas - 1; len(info.Cluster.Replicas) != want {
		return false, fmt.Sprintf("stream %s: %d peers of its leader, want %d", stream, len(info.Cluster.Replicas), want)
	}
	for _, r := range info.Cluster.Replicas {
		if !r.Current || r.Offline {
			return false, fmt.Sprintf("stream %s: replica %s not current (lag %d)", stream, r.Name, r.Lag)
		}
	}
	return true, ""
}
