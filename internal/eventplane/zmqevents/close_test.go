package zmqevents_test

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"go.uber.org/goleak"

	"github.com/kvrouter/kvrouter/internal/eventplane/zmqevents"
	"github.com/kvrouter/kvrouter/internal/fleet"
)

// A worker announced after Close has begun (a registry notification
// racing shutdown) must start no follower: Close would neither stop it
// nor wait for it, and its dial loop would run forever. Without the
// closed check the follower below redials the dead endpoint until the
// process ends, which goleak reports.
func TestNotifyAfterCloseStartsNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing will publish on
	if err != nil {
		t.Fatal(err)
	}
	ep := "tcp://" + ln.Addr().String()
	_ = ln.Close()
	c, err := zmqevents.NewConsumer(zmqevents.DefaultConsumerConfig(), &view{}, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.Notify(fleet.Notification{Kind: fleet.Added, Worker: fleet.Worker{Record: fleet.WorkerRecord{
		ID: 7, Name: "late", DPSize: 1, Events: fleet.EventSource{Kind: fleet.EventsZMQ, Endpoint: ep}}}})
}
