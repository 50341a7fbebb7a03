package vllmzmq

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-zeromq/zmq4 v0.17.0: a PUB socket's writer goroutine waits on a
		// condition variable that Close never signals (pubSocket.Close does
		// not close its pubMWriter). One parked goroutine per closed PUB
		// socket; not ours to fix here.
		goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"),
	)
}
