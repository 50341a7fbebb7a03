package zmtpguard

import (
	"errors"
	"fmt"
)

// ErrFrameTooLarge is returned (wrapped) when a peer announces a frame, or
// a multipart message, larger than the cap; the connection is closed.
var ErrFrameTooLarge = errors.New("zmtp frame larger than the cap")

// DefaultMaxFrameBytes is the default cap on the announced size of one
// frame, and of all frames of one multipart message together:
// far above the largest legitimate KV event batch (the decoders refuse
// batches of more than 2^21 tokens, about 10 MiB), far below what would
// hurt a router.
const DefaultMaxFrameBytes = 64 << 20

// DefaultMaxRequestBytes is the default cap for sockets that only ever
// receive subscriptions and small requests (a publisher's PUB, a replay or
// recovery ROUTER): zmq4 queues what such a socket reads (ten messages
// per socket, one more per blocked connection) whether or not anyone
// reads them, so a stranger's frames there must stay small.
const DefaultMaxRequestBytes = 64 << 10

// GreetingLen is the length of a ZMTP 3.x greeting.
const GreetingLen = 64

// Frame flag bits (ZMTP 3.x).
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

type parseState uint8

const (
	stGreeting parseState = iota // skipping the rest of the greeting
	stFlags                      // next byte is a frame's flags
	stShort                      // next byte is a 1-byte size
	stLong                       // reading an 8-byte size
	stBody                       // skipping a frame body
)

// Parser follows one direction of a ZMTP 3.x byte stream, as it arrives
// in pieces of any size, and reports the first frame whose announced size
// passes the cap. It allocates nothing and never trusts a size beyond
// counting bytes down. The zero value is not usable; use NewParser.
type Parser struct {
	max    uint64
	state  parseState
	left   uint64 // bytes left of the greeting, the long size or the body
	size   uint64 // long size read so far
	msg    uint64 // sizes of the current message's earlier frames (MORE set)
	flags  byte
	frames uint64
	shook  bool // the greeting and a whole command frame have passed
	err    error
}

// NewParser returns a parser at the start of a stream (before the
// greeting) that refuses frames, and multipart messages, of more than max
// bytes.
func NewParser(max uint64) Parser {
	return Parser{max: max, state: stGreeting, left: GreetingLen}
}

// Feed consumes the next bytes of the stream. It returns a wrapped
// ErrFrameTooLarge once a frame header announces more than the cap, and
// the same error on every later call.
func (p *Parser) Feed(b []byte) error {
	if p.err != nil {
		return p.err
	}
	for len(b) > 0 {
		switch p.state {
		case stGreeting, stBody:
			n := min(uint64(len(b)), p.left)
			b = b[n:]
			p.left -= n
			if p.left == 0 {
				if p.state == stBody && p.flags&flagCommand != 0 {
					p.shook = true
				}
				p.state = stFlags
			}
		case stFlags:
			p.flags = b[0]
			b = b[1:]
			p.state, p.left, p.size = stShort, 1, 0
			if p.flags&flagLong != 0 {
				p.state, p.left = stLong, 8
			}
		case stShort, stLong:
			p.size = p.size<<8 | uint64(b[0])
			b = b[1:]
			p.left--
			if p.left == 0 {
				if err := p.begin(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// begin starts the body of a frame whose size is known. The cap applies
// to a whole message: zmq4 keeps every frame of a multipart message in
// memory until its last frame, so its frames' sizes add up.
func (p *Parser) begin() error {
	if p.size > p.max || p.msg > p.max-p.size {
		kind := "message"
		if p.flags&flagCommand != 0 {
			kind = "command"
		}
		p.err = fmt.Errorf("%w: %s frame announces %d bytes after %d in its message, cap %d",
			ErrFrameTooLarge, kind, p.size, p.msg, p.max)
		return p.err
	}
	p.frames++
	p.msg += p.size
	if p.flags&flagMore == 0 || p.flags&flagCommand != 0 {
		p.msg = 0
	}
	p.state, p.left = stBody, p.size
	if p.size == 0 {
		p.state = stFlags
		if p.flags&flagCommand != 0 {
			p.shook = true
		}
	}
	return nil
}

// Handshaken reports whether the greeting and one whole command frame
// (the NULL mechanism's READY, the end of the peer's handshake) have
// passed.
func (p *Parser) Handshaken() bool { return p.shook }

// Frames returns how many frame headers were accepted so far.
func (p *Parser) Frames() uint64 { return p.frames }
