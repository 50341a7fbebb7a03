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
type Cluster struct {
	t     testing.TB
	mu    sync.Mutex
	nodes []*ClusterNode
}

// ClusterNode is one node of a Cluster.
type ClusterNode struct {
	c           *Cluster
	name, dir   string
	port, route int // client and cluster ports, kept across restarts
	srv         *natsserver.Server
	isolated    bool
}

// StartCluster starts n nodes (n ≥ 1) and waits until the cluster has
// formed (WaitFormed). Every node is stopped at cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("cluster of %d nodes", n)
	}
	c := &Cluster{t: t}
	ports := freePorts(t, 2*n)
	for i := range n {
		c.nodes = append(c.nodes, &ClusterNode{c: c, name: fmt.Sprintf("n%d", i+1), dir: t.TempDir(),
			port: ports[2*i], route: ports[2*i+1]})
	}
	t.Cleanup(func() {
		for _, nd := range c.nodes {
			nd.Stop()
		}
	})
	for _, nd := range c.nodes {
		nd.Start()
	}
	c.WaitFormed(30 * time.Second)
	return c
}

// freePorts reserves n distinct free loopback ports (all held open at
// once, then released): every node's routes must name the other nodes'
// cluster ports before any of them starts.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports
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

// routes is every node's cluster URL.
func (c *Cluster) routes() []*url.URL {
	var rs []*url.URL
	for _, nd := range c.nodes {
		rs = append(rs, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", nd.route)})
	}
	return rs
}

// Formed reports whether every running node that is not isolated has a
// route to every other such node, sees JetStream's meta group as current,
// and exactly one of them is the meta leader; the detail says what is
// missing.
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
	deadline := time.Now().Add(d)
	for {
		ok, detail := c.Formed()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for the NATS cluster to form: %s", detail)
		}
		time.Sleep(pollEvery)
	}
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

// Start starts a stopped node on its ports with its store, routed to the
// others; it does not wait for the cluster to form (WaitFormed does).
func (n *ClusterNode) Start() {
	n.c.t.Helper()
	n.start(false)
}

// Isolate cuts the node off from the others, as a network partition
// would: it is restarted with the same client port and store but with a
// cluster listener on a fresh port and no route but one to itself (which
// the server drops; JetStream in a cluster refuses to start without one). nats-server has no API
// to drop a route from outside, and a closed route is dialled again by
// its peers within milliseconds; with the node listening elsewhere and
// dialling no one, its peers' dials to its cluster port are refused and
// no route forms either way. The isolated node keeps serving clients
// (core NATS among its own clients only; JetStream requests find no
// quorum). Its clients are disconnected by the restart and reconnect to
// whichever node their URL list gives them. Start (after Stop) heals.
func (n *ClusterNode) Isolate() {
	n.c.t.Helper()
	n.Stop()
	n.start(true)
}

// Heal ends an isolation: the node restarts routed to the others.
func (n *ClusterNode) Heal() {
	n.c.t.Helper()
	n.Stop()
	n.Start()
}

func (n *ClusterNode) start(isolated bool) {
	n.c.t.Helper()
	n.c.mu.Lock()
	running := n.srv != nil
	n.c.mu.Unlock()
	if running {
		return
	}
	route := n.route
	routes := n.c.routes()
	if isolated {
		// JetStream in a cluster needs a configured route: the node's own
		// (a route to self is recognised and dropped).
		route = freePorts(n.c.t, 1)[0]
		routes = []*url.URL{{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", route)}}
	}
	var s *natsserver.Server
	var err error
	// A restarted node binds the same ports; the old sockets may take a
	// moment to let go.
	for deadline := time.Now().Add(10 * time.Second); ; {
		o := &natsserver.Options{ServerName: n.name, Host: "127.0.0.1", Port: n.port, NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: n.dir,
			Cluster: natsserver.ClusterOpts{Name: ClusterName, Host: "127.0.0.1", Port: route},
			Routes:  routes}
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
	n.srv, n.isolated = s, isolated
	n.c.mu.Unlock()
}

// Stop shuts the node down (a crash, as far as the cluster and clients
// can tell) and waits for it; stopping a stopped node does nothing.
func (n *ClusterNode) Stop() {
	n.c.mu.Lock()
	s := n.srv
	n.srv, n.isolated = nil, false
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
