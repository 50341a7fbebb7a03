package frontend

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server serves a Frontend on a listener with a graceful shutdown.
type Server struct {
	f    *Frontend
	srv  *http.Server
	ln   net.Listener
	once sync.Once
}

// NewServer prepares to serve f on ln; Serve starts it.
func (f *Frontend) NewServer(ln net.Listener) *Server {
	return &Server{f: f, ln: ln, srv: &http.Server{
		Handler:           f.Handler(),
		ReadHeaderTimeout: f.cfg.ReadHeaderTimeout,
		IdleTimeout:       f.cfg.IdleTimeout,
		MaxHeaderBytes:    f.cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(f.log.Handler(), slog.LevelWarn),
	}}
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts connections until Shutdown; it returns nil after a
// shutdown and the listener's error otherwise. While it serves, the
// workers' load is sampled every 5 s for the status page's charts.
func (s *Server) Serve() error {
	defer s.f.startSampler()() // the status page's charts (status.go)
	err := s.srv.Serve(s.ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeTLS is Serve over TLS with the PEM certificate and key files
// (HTTP/2 offered by ALPN).
func (s *Server) ServeTLS(certFile, keyFile string) error {
	defer s.f.startSampler()() // the status page's charts (status.go)
	err := s.srv.ServeTLS(s.ln, certFile, keyFile)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting connections, waits for in-flight requests —
// streams included — to finish, for at most Config.ShutdownTimeout or
// until ctx ends, then closes whatever is still open (those requests'
// upstream calls are cancelled and their bookings freed) and waits, at
// most handlerGrace more, for their handlers to return. It returns ctx's
// error or context.DeadlineExceeded when it had to force-close.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		sctx, cancel := context.WithTimeout(ctx, s.f.cfg.ShutdownTimeout)
		defer cancel()
		if err = s.srv.Shutdown(sctx); err != nil {
			_ = s.srv.Close()
			// Closing a connection cancels its request's context, which
			// cancels the upstream call: handlers return promptly.
			done := make(chan struct{})
			go func() { s.f.handlers.Wait(); close(done) }()
			t := time.NewTimer(handlerGrace)
			select {
			case <-done:
			case <-t.C:
				s.f.log.Warn("handlers still running after the forced shutdown", "waited", handlerGrace)
			}
			t.Stop()
		}
		s.f.CloseIdleConnections()
	})
	return err
}

// handlerGrace bounds the wait for handlers after a forced shutdown.
const handlerGrace = 2 * time.Second
