// Package zmtpguard keeps a ZeroMQ peer from making this process allocate
// by its word. github.com/go-zeromq/zmq4 (v0.17.0) reads a frame header
// and then allocates whatever size the header announces, up to 2^63
// bytes, before reading the body, during the handshake as well as after:
// one nine-byte header from anyone who can reach a socket ends the process
// with "out of memory". zmq4 offers no option to cap it.
//
// The guard sits under zmq4, as a transport: a net.Conn whose Read follows
// the ZMTP 3.x byte stream as it passes (the 64-byte greeting, then frames
// of a flags byte and a 1- or 8-byte big-endian size) with a small
// incremental Parser, and closes the connection with ErrFrameTooLarge as
// soon as a header announces more than the cap (a frame, or the frames of
// one multipart message together, which zmq4 keeps until the last), before
// zmq4 sees the header; optionally it also caps what one connection may
// send in all (ErrTooMuchInput). Both refusals reach zmq4 as non-timeout
// net.Errors, the only errors it takes for a closed connection. It registers the transports "zmtpguard+tcp" and "zmtpguard+ipc"
// with zmq4; Endpoint rewrites "tcp://…" and "ipc://…" to them, and the
// cap rides on the socket's context (WithOptions), so every socket can
// have its own. Sockets opened on a plain endpoint are not guarded.
//
// zmq4 also runs each accepted connection's handshake on its accepting
// goroutine with no deadline, so one silent TCP connection kept a bound
// socket from accepting anyone else. A guarded listener accepts on a
// goroutine of its own and hands zmq4 only connections that sent their
// greeting's signature within the handshake timeout (HandshakeTimeout,
// default 10 s; at most MaxPendingHandshakes wait at once), and every
// guarded connection whose handshake has not passed by then is closed.
//
// Closing a zmq4 socket can leave its per-connection reader goroutines
// blocked on a full queue. Drain (SUB, DEALER) and RouterSock (ROUTER)
// empty the socket before closing it, so a closed socket leaves nothing
// running.
package zmtpguard
