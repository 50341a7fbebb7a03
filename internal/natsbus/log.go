package natsbus

import (
	"fmt"
	"log/slog"

	"github.com/nats-io/nats-server/v2/server"
)

// serverLogger routes the embedded server's log lines to slog: notices
// (its multi-line start-up banner, routine lifecycle lines) at Debug, since
// Start logs the one line an operator needs; warnings at Warn, errors and fatal errors at Error, debug and trace
// at Debug.
type serverLogger struct{ l *slog.Logger }

func (s serverLogger) Noticef(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s serverLogger) Warnf(format string, v ...any)   { s.l.Warn(fmt.Sprintf(format, v...)) }
func (s serverLogger) Fatalf(format string, v ...any)  { s.l.Error(fmt.Sprintf(format, v...)) }
func (s serverLogger) Errorf(format string, v ...any)  { s.l.Error(fmt.Sprintf(format, v...)) }
func (s serverLogger) Debugf(format string, v ...any)  { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s serverLogger) Tracef(format string, v ...any)  { s.l.Debug(fmt.Sprintf(format, v...)) }

var _ server.Logger = serverLogger{}
