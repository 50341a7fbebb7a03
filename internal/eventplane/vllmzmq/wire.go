package vllmzmq

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// endSeq is the sequence frame of the replay END marker: -1 as a signed
// 64-bit big-endian integer.
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ReplayFormat is the shape of the replay replies a publisher sends.
type ReplayFormat uint8

// The two reply formats, as the DEALER receives them.
const (
	// ReplayTopic is vLLM after vllm-project/vllm#45177 (June 2026):
	// ["", topic, seq, payload], END ["", "", FF×8, ""].
	ReplayTopic ReplayFormat = iota
	// ReplayLegacy is older vLLM and all SGLang: ["", seq, payload], END
	// ["", FF×8, ""].
	ReplayLegacy
)

// String names the format: topic or legacy.
func (f ReplayFormat) String() string {
	if f == ReplayLegacy {
		return "legacy"
	}
	return "topic"
}

// ParseReplayFormat parses "topic" or "legacy".
func ParseReplayFormat(s string) (ReplayFormat, error) {
	switch s {
	case "topic":
		return ReplayTopic, nil
	case "legacy":
		return ReplayLegacy, nil
	}
	return 0, fmt.Errorf("unknown replay format %q (want topic or legacy)", s)
}

func seqFrame(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

// parseSeq reads a sequence frame; vLLM always sends 8 bytes, but any
// length up to 8 is read as an unsigned big-endian integer.
func parseSeq(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 8 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v, true
}

// OffsetEndpoint returns the endpoint of data-parallel rank r, as vLLM's
// offset_endpoint_port does: rank 0 keeps the endpoint, a tcp endpoint gets
// its port plus r, an inproc endpoint the suffix "_dp<r>". Anything else is
// an error.
func OffsetEndpoint(endpoint string, rank int) (string, error) {
	if rank == 0 {
		return endpoint, nil
	}
	switch {
	case strings.HasPrefix(endpoint, "tcp://"):
		i := strings.LastIndex(endpoint, ":")
		port, err := strconv.Atoi(endpoint[i+1:])
		if p := endpoint[i+1:]; err != nil || i < len("tcp://") || port < 0 || p[0] == '+' || (len(p) > 1 && p[0] == '0') {
			return "", fmt.Errorf("endpoint %q has no numeric port (decimal, no sign or leading zeros)", endpoint)
		}
		if port+rank > 65535 {
			return "", fmt.Errorf("endpoint %q: port + rank %d exceeds 65535", endpoint, rank)
		}
		if port == 0 {
			return "", fmt.Errorf("endpoint %q: port 0 cannot be offset per rank", endpoint)
		}
		return endpoint[:i+1] + strconv.Itoa(port+rank), nil
	case strings.HasPrefix(endpoint, "inproc://"):
		return fmt.Sprintf("%s_dp%d", endpoint, rank), nil
	}
	return "", fmt.Errorf("endpoint %q: only tcp and inproc endpoints can be offset per rank", endpoint)
}

// dialable turns a bind address such as tcp://*:5557 or tcp://0.0.0.0:5557
// into one a local client can dial (127.0.0.1).
func dialable(endpoint string) string {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return endpoint
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return endpoint
	}
	switch host {
	case "*", "", "0.0.0.0", "::":
		return "tcp://" + net.JoinHostPort("127.0.0.1", port)
	}
	return endpoint
}

// splitLive reads a live message: [topic, seq, payload]. Extra frames are
// ignored; fewer, or a sequence frame that is not 1..8 bytes, is not a KV
// event message.
func splitLive(frames [][]byte) (topic []byte, seq uint64, payload []byte, ok bool) {
	if len(frames) < 3 {
		return nil, 0, nil, false
	}
	seq, ok = parseSeq(frames[1])
	return frames[0], seq, frames[2], ok
}

// splitReply reads a replay reply as the DEALER receives it, in either
// format: ["", seq, payload] (legacy) or ["", topic, seq, payload]
// (current vLLM). end is true for the END marker.
func splitReply(frames [][]byte) (seq uint64, payload []byte, end, ok bool) {
	var seqB []byte
	switch len(frames) {
	case 3:
		seqB, payload = frames[1], frames[2]
	case 4:
		seqB, payload = frames[2], frames[3]
	default:
		return 0, nil, false, false
	}
	if bytes.Equal(seqB, endSeq) {
		return 0, nil, true, true
	}
	seq, ok = parseSeq(seqB)
	return seq, payload, false, ok
}
