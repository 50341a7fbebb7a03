package natsevents

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvrouter/kvrouter/internal/eventplane/recovery"
	"github.com/nats-io/nats.go"
)

// ErrNoResponders means no worker rank listens on the query subject.
var ErrNoResponders = errors.New("no recovery responder")

// Querier asks worker ranks over NATS request/reply; replies may span
// several messages, collected on a private inbox.
type Querier struct {
	conn                 *nats.Conn
	namespace, component string
}

var _ recovery.Querier = (*Querier)(nil)

// NewQuerier returns a querier on conn for the given namespace/component.
func NewQuerier(conn *nats.Conn, namespace, component string) *Querier {
	return &Querier{conn: conn, namespace: namespace, component: component}
}

// Query sends req to its worker rank and assembles the reply.
func (q *Querier) Query(ctx context.Context, req recovery.Request) (recovery.Reply, error) {
	inbox := q.conn.NewInbox()
	sub, err := q.conn.SubscribeSync(inbox)
	if err != nil {
		return recovery.Reply{}, fmt.Errorf("query %v: %w", req, err)
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	subj := QuerySubject(q.namespace, q.component, req.Worker)
	if err := q.conn.PublishRequest(subj, inbox, recovery.EncodeRequest(req)); err != nil {
		return recovery.Reply{}, fmt.Errorf("query %v: %w", req, err)
	}
	var a recovery.Assembler
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return recovery.Reply{}, fmt.Errorf("query %v: %w", req, err)
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return recovery.Reply{}, fmt.Errorf("query %v on %s: %w", req, subj, ErrNoResponders)
		}
		done, err := a.AddEncoded(m.Data)
		if err != nil {
			return recovery.Reply{}, fmt.Errorf("query %v: %w", req, err)
		}
		if done {
			return a.Reply(), nil
		}
	}
}
