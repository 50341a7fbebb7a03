package zmtpguard

import (
	"log/slog"
	"net"
	"sync"
	"time"
)

// refusalLogEvery is the least time between two refusal log lines of one
// socket: a peer that reconnects and misbehaves in a loop must not flood
// the log.
const refusalLogEvery = 10 * time.Second

// LogRefusals returns an Options.Refused that calls count (when not nil)
// for every refused connection and logs a warning naming the socket and
// the peer at most once per 10 s, with how many refusals the previous
// line left out.
func LogRefusals(log *slog.Logger, socket string, count func()) func(net.Addr, error) {
	var (
		mu         sync.Mutex
		last       time.Time
		suppressed int
	)
	return func(remote net.Addr, err error) {
		if count != nil {
			count()
		}
		mu.Lock()
		now := time.Now()
		if !last.IsZero() && now.Sub(last) < refusalLogEvery {
			suppressed++
			mu.Unlock()
			return
		}
		n := suppressed
		last, suppressed = now, 0
		mu.Unlock()
		peer := "?"
		if remote != nil {
			peer = remote.String()
		}
		log.Warn("ZMQ peer sent an oversized frame or too much, or no handshake in time; connection dropped", "socket", socket, "peer", peer,
			"err", err, "not_logged_since_last", n)
	}
}
