package service

import (
	"fmt"

	"github.com/kvrouter/kvrouter/internal/replica"
)

// startSessions shares session-affinity bindings with the other router
// replicas when both session affinity and replica sync are on: bindings
// of live replicas only (replica sync's membership), first binding wins.
func (s *Service) startSessions() error {
	if s.rs == nil || s.sess != nil || !s.front.SessionAffinity() {
		return nil
	}
	ss, err := replica.NewSessions(replica.SessionsConfig{Namespace: s.cfg.EventPlane.Namespace, Component: s.cfg.EventPlane.Component,
		RouterID: s.router.Config().RouterID, Member: s.rs.Core().Member, Learn: s.front.LearnSession, Registry: s.reg},
		s.bus, s.log.With("component", "sessions"))
	if err != nil {
		return fmt.Errorf("building session sharing: %w", err)
	}
	if err := ss.Start(); err != nil {
		return err
	}
	s.sess = ss
	s.front.SetSessionSharer(ss)
	return nil
}

// closeSessions stops session sharing.
func (s *Service) closeSessions() {
	if s.sess != nil {
		s.front.SetSessionSharer(nil)
		s.sess.Close()
	}
}
