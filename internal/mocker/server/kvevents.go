package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// KVEventsConfig is vLLM's --kv-events-config JSON, the same keys and
// defaults (vllm/config/kv_events.py).
type KVEventsConfig struct {
	// EnableKVCacheEvents is the master switch. Default false.
	EnableKVCacheEvents bool `json:"enable_kv_cache_events"`
	// Publisher is "zmq" or "null"; empty means zmq when enabled.
	Publisher string `json:"publisher"`
	// Endpoint is the PUB address; rank r of a data-parallel engine uses
	// port + r. Default "tcp://*:5557".
	Endpoint string `json:"endpoint"`
	// ReplayEndpoint is the ROUTER replay address (port + rank too); empty
	// means no replay socket.
	ReplayEndpoint string `json:"replay_endpoint"`
	// BufferSteps is the number of batches kept for replay. Default 10000.
	BufferSteps int `json:"buffer_steps"`
	// HWM is the PUB send high-water mark in messages. Default 100000.
	HWM int `json:"hwm"`
	// MaxQueueSize is accepted for compatibility; the mock publishes
	// synchronously. Default 100000.
	MaxQueueSize int `json:"max_queue_size"`
	// Topic is the first frame of every message. Default "".
	Topic string `json:"topic"`
}

// DefaultKVEventsConfig returns vLLM's defaults (disabled).
func DefaultKVEventsConfig() KVEventsConfig {
	return KVEventsConfig{Endpoint: "tcp://*:5557", BufferSteps: 10000, HWM: 100000, MaxQueueSize: 100000}
}

// ParseKVEventsConfig reads the JSON of --kv-events-config over vLLM's
// defaults. Unknown keys are refused, so typos do not silently disable
// events.
func ParseKVEventsConfig(s string) (KVEventsConfig, error) {
	c := DefaultKVEventsConfig()
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("parsing kv events config: %w", err)
	}
	return c, c.Validate()
}

// Enabled reports whether a ZMQ publisher should run.
func (c KVEventsConfig) Enabled() bool {
	return c.EnableKVCacheEvents && (c.Publisher == "" || c.Publisher == "zmq")
}

// Validate checks the configuration.
func (c KVEventsConfig) Validate() error {
	switch {
	case c.Publisher != "" && c.Publisher != "zmq" && c.Publisher != "null":
		return fmt.Errorf("kv events config: unknown publisher %q (want zmq or null)", c.Publisher)
	case c.Enabled() && c.Endpoint == "":
		return fmt.Errorf("kv events config: endpoint is required")
	case c.BufferSteps <= 0:
		return fmt.Errorf("kv events config: buffer_steps %d must be positive", c.BufferSteps)
	case c.HWM < 0:
		return fmt.Errorf("kv events config: hwm %d is negative", c.HWM)
	}
	if c.Enabled() {
		if _, err := OffsetEndpoint(c.Endpoint, 0); err != nil {
			return err
		}
		if c.ReplayEndpoint != "" {
			if _, err := OffsetEndpoint(c.ReplayEndpoint, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// OffsetEndpoint moves an endpoint to data-parallel rank offset as vLLM
// does: a tcp endpoint's port plus offset (port 0 stays 0: every rank binds
// its own free port), an inproc endpoint gets "_dp<offset>" appended
// (nothing for 0); anything else is an error.
func OffsetEndpoint(endpoint string, offset int) (string, error) {
	switch {
	case strings.HasPrefix(endpoint, "inproc://"):
		if offset == 0 {
			return endpoint, nil
		}
		return fmt.Sprintf("%s_dp%d", endpoint, offset), nil
	case strings.HasPrefix(endpoint, "tcp://"):
		i := strings.LastIndexByte(endpoint, ':')
		port, ok := parsePort(endpoint[i+1:])
		if i < len("tcp://") || !ok {
			return "", fmt.Errorf("kv events endpoint %q has no valid port (want 0..65535 in decimal, no sign or leading zeros)", endpoint)
		}
		if port == 0 {
			return endpoint, nil
		}
		if port+offset > 65535 {
			return "", fmt.Errorf("kv events endpoint %q: port + offset %d exceeds 65535", endpoint, offset)
		}
		return endpoint[:i+1] + strconv.Itoa(port+offset), nil
	}
	return "", fmt.Errorf("kv events endpoint %q: only tcp:// and inproc:// endpoints can be offset per rank", endpoint)
}

// parsePort reads a TCP port written the one way ZMQ and vLLM agree on:
// decimal digits, no sign, no leading zeros (so that the endpoint a rank
// binds is the text the operator wrote), 0..65535.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	port := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		port = port*10 + int(s[i]-'0')
	}
	return port, port <= 65535
}
