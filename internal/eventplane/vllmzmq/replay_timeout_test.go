package vllmzmq

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// TestReplayBoundedByTimeout: a replay peer that accepts the TCP connection
// but never speaks ZMTP (a process stopping mid-accept, a hung engine) does
// not hold Replay past its timeout. It used to block until the peer closed
// the connection, leaving a router's worker SYNCING for good (found by
// internal/chaos: router restarted next to crashing workers).
func TestReplayBoundedByTimeout(t *testing.T) {
	addr, accepted := silentPeer(t)
	r := &dealerReplayer{endpoint: "tcp://" + addr, retry: 20 * time.Millisecond, timeout: 300 * time.Millisecond, log: quiet}
	done := make(chan error, 1)
	go func() {
		done <- r.Replay(context.Background(), 0, func(uint64, []byte) bool {
			t.Error("fn called without a reply")
			return true
		})
	}()
	<-accepted
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Replay against a silent peer returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Replay still blocked 5 s after its 300 ms timeout")
	}
}

// TestRunStopsWhilePeerSilent: Run returns on cancel even while its dial
// waits for a peer that accepted the connection and never speaks ZMTP, so
// a router's shutdown is not held by a hung engine.
func TestRunStopsWhilePeerSilent(t *testing.T) {
	addr, accepted := silentPeer(t)
	cfg := DefaultSubscriberConfig()
	cfg.Worker, cfg.Endpoint, cfg.Topic, cfg.BlockSize = worker, "tcp://"+addr, testTopic, 4
	cfg.DialRetry = 20 * time.Millisecond
	cfg.Logger = quiet
	sub, err := NewSubscriber(cfg, &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	<-accepted
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still blocked 5 s after cancel")
	}
}

// silentPeer listens on loopback, accepts connections and never writes a
// byte (no ZMTP greeting); each accept is signalled on the channel. The
// listener and held connections are closed at test cleanup.
func silentPeer(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			accepted <- struct{}{}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String(), accepted
}
