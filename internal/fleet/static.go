package fleet

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/kvrouter/kvrouter/internal/kvevent"
)

// StaticWorker is one entry of the static worker list, as written in the
// config file's `workers:` list or in a --worker flag. The YAML keys and
// the flag keys are the same words.
type StaticWorker struct {
	// Name is the worker's unique name. Required.
	Name string `yaml:"name"`
	// ID is the worker id; 0 (default) derives it from Name (DeriveID).
	ID uint64 `yaml:"id,omitempty"`
	// URL is the worker's HTTP base URL ("http://10.0.0.5:8000"). Required.
	URL string `yaml:"url"`
	// Model is the served model name. Default "" (the fleet's one model).
	Model string `yaml:"model,omitempty"`
	// Events is the engine's ZMQ PUB endpoint ("tcp://10.0.0.5:5557"), or
	// "nats" for RouterEvents on the NATS event plane. Default "" (no
	// events: approximate mode).
	Events string `yaml:"events,omitempty"`
	// Replay is the engine's ZMQ replay endpoint. Default "" (none).
	Replay string `yaml:"replay,omitempty"`
	// Topic is the ZMQ topic filter. Default "" (all topics).
	Topic string `yaml:"topic,omitempty"`
	// BlockSize is the engine's KV block size in tokens. Default 0: the
	// router's --block-size.
	BlockSize int `yaml:"block-size,omitempty"`
	// DPStart is the first data-parallel rank. Default 0.
	DPStart uint32 `yaml:"dp-start,omitempty"`
	// DPSize is the number of data-parallel ranks. Default 0 means 1.
	DPSize uint32 `yaml:"dp-size,omitempty"`
	// KVBlocks is the KV cache capacity in blocks. Default 0 (unknown).
	KVBlocks uint64 `yaml:"kv-blocks,omitempty"`
	// MaxBatchedTokens is the engine's max batched tokens. Default 0
	// (unknown).
	MaxBatchedTokens uint64 `yaml:"max-batched-tokens,omitempty"`
	// Hash is the worker's hash contract ("xxh3-1337-v1+lora+ns"). Default
	// "": the router's contract.
	Hash string `yaml:"hash,omitempty"`
	// Role is prefill, decode or both. Default "" (both).
	Role string `yaml:"role,omitempty"`
	// BootstrapPort is an SGLang prefill worker's KV bootstrap port.
	// Default 0 (none).
	BootstrapPort int `yaml:"bootstrap-port,omitempty"`
}

// Record turns the entry into a validated WorkerRecord. defaultBlockSize
// and defaultHash stand in for an absent block-size and hash.
func (s StaticWorker) Record(defaultBlockSize int, defaultHash HashContract) (WorkerRecord, error) {
	r := WorkerRecord{
		ID:               kvevent.WorkerID(s.ID),
		Name:             s.Name,
		Model:            s.Model,
		URL:              s.URL,
		BlockSize:        s.BlockSize,
		DPStart:          s.DPStart,
		DPSize:           s.DPSize,
		KVCapacityBlocks: s.KVBlocks,
		MaxBatchedTokens: s.MaxBatchedTokens,
		Hash:             defaultHash,
		RegisteredBy:     "static",
		BootstrapPort:    s.BootstrapPort,
	}
	role, err := ParseRole(s.Role)
	if err != nil {
		return r, fmt.Errorf("worker %q: %w", s.Name, err)
	}
	if s.Role != "" {
		r.Role = role
	}
	if r.ID == 0 {
		r.ID = DeriveID(s.Name)
	}
	if s.BlockSize == 0 {
		r.BlockSize = defaultBlockSize
	}
	if r.DPSize == 0 {
		r.DPSize = 1
	}
	if s.Hash != "" {
		h, err := ParseHashContract(s.Hash)
		if err != nil {
			return r, fmt.Errorf("worker %q: %w", s.Name, err)
		}
		r.Hash = h
	}
	switch {
	case s.Events == "":
		r.Events.Kind = EventsNone
		if s.Replay != "" || s.Topic != "" {
			return r, fmt.Errorf("worker %q: replay/topic given without events", s.Name)
		}
	case s.Events == "nats":
		r.Events = EventSource{Kind: EventsNATS}
	default:
		r.Events = EventSource{Kind: EventsZMQ, Endpoint: s.Events, Replay: s.Replay, Topic: s.Topic}
	}
	if err := r.Validate(); err != nil {
		return r, err
	}
	return r, nil
}

// BuildStatic converts a static list into records, refusing duplicate names
// and duplicate ids with a clear error.
func BuildStatic(entries []StaticWorker, defaultBlockSize int, defaultHash HashContract) ([]WorkerRecord, error) {
	out := make([]WorkerRecord, 0, len(entries))
	names := map[string]bool{}
	ids := map[kvevent.WorkerID]string{}
	for i, e := range entries {
		r, err := e.Record(defaultBlockSize, defaultHash)
		if err != nil {
			return nil, fmt.Errorf("static worker %d: %w", i+1, err)
		}
		if names[r.Name] {
			return nil, fmt.Errorf("static worker %d: duplicate name %q", i+1, r.Name)
		}
		if other, dup := ids[r.ID]; dup {
			return nil, fmt.Errorf("static worker %d (%q): id %d already used by %q", i+1, r.Name, r.ID, other)
		}
		names[r.Name] = true
		ids[r.ID] = r.Name
		out = append(out, r)
	}
	return out, nil
}

// StaticFile is a YAML document holding only a static worker list.
type StaticFile struct {
	// Workers is the list.
	Workers []StaticWorker `yaml:"workers"`
}

// ParseStaticYAML reads a YAML document with a `workers:` list. Unknown
// keys are errors (a typo must not silently drop a setting).
func ParseStaticYAML(r io.Reader) ([]StaticWorker, error) {
	d := yaml.NewDecoder(r)
	d.KnownFields(true)
	var f StaticFile
	if err := d.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parsing static workers: %w", err)
	}
	return f.Workers, nil
}

// flagKeys are the keys a --worker value may use.
var flagKeys = []string{"name", "id", "url", "model", "events", "replay", "topic", "block-size", "dp-start", "dp-size", "kv-blocks", "max-batched-tokens", "hash", "role", "bootstrap-port"}

// ParseWorkerFlag parses one --worker value:
//
//	name=w1,url=http://10.0.0.5:8000,events=tcp://10.0.0.5:5557,replay=tcp://10.0.0.5:5558,block-size=16,dp-size=1,topic=kv
//
// Keys are those of StaticWorker's YAML form; name and url are required;
// values cannot contain commas. Errors name the offending key.
func ParseWorkerFlag(s string) (StaticWorker, error) {
	var w StaticWorker
	seen := map[string]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return w, fmt.Errorf("worker %q: %q is not key=value", s, part)
		}
		if seen[k] {
			return w, fmt.Errorf("worker %q: key %q given twice", s, k)
		}
		seen[k] = true
		var err error
		switch k {
		case "name":
			w.Name = v
		case "id":
			w.ID, err = strconv.ParseUint(v, 10, 64)
			if err == nil && w.ID == 0 {
				err = errors.New("must be positive")
			}
		case "url":
			w.URL = v
			err = checkHTTPURL(v)
		case "model":
			w.Model = v
		case "events":
			w.Events = v
			if v != "nats" {
				err = checkZMQEndpoint("events", v)
			}
		case "replay":
			w.Replay = v
			err = checkZMQEndpoint("replay", v)
		case "topic":
			w.Topic = v
		case "block-size":
			var n uint64
			n, err = parseCount(v, math.MaxInt32)
			w.BlockSize = int(n)
		case "dp-start":
			var n uint64
			n, err = strconv.ParseUint(v, 10, 32)
			w.DPStart = uint32(n)
		case "dp-size":
			var n uint64
			n, err = parseCount(v, math.MaxUint32)
			w.DPSize = uint32(n)
		case "kv-blocks":
			w.KVBlocks, err = strconv.ParseUint(v, 10, 64)
		case "max-batched-tokens":
			w.MaxBatchedTokens, err = strconv.ParseUint(v, 10, 64)
		case "hash":
			w.Hash = v
			_, err = ParseHashContract(v)
		case "role":
			w.Role = v
			_, err = ParseRole(v)
		case "bootstrap-port":
			var n uint64
			n, err = parseCount(v, 65535)
			w.BootstrapPort = int(n)
		default:
			return w, fmt.Errorf("worker %q: unknown key %q (known: %s)", s, k, strings.Join(flagKeys, ", "))
		}
		if err != nil {
			return w, fmt.Errorf("worker %q: %s=%q: %w", s, k, v, err)
		}
	}
	if w.Name == "" {
		return w, fmt.Errorf("worker %q: name is required", s)
	}
	if w.URL == "" {
		return w, fmt.Errorf("worker %q: url is required", s)
	}
	return w, nil
}

// parseCount parses a positive integer no larger than max.
func parseCount(v string, max uint64) (uint64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, errors.New("not an integer")
	}
	if n <= 0 {
		return 0, errors.New("must be positive")
	}
	if uint64(n) > max {
		return 0, fmt.Errorf("must be at most %d", max)
	}
	return uint64(n), nil
}

// WorkerFlags is a repeatable --worker flag (a flag.Value): each use adds
// one static worker; a name used twice is an error. The compile-time
// guard is in package config, its consumer: importing flag here would
// pull package os into the pure fleet model.
type WorkerFlags []StaticWorker

// String renders the workers back in flag form, names sorted.
func (w *WorkerFlags) String() string {
	if w == nil {
		return ""
	}
	parts := make([]string, 0, len(*w))
	for _, s := range *w {
		parts = append(parts, "name="+s.Name+",url="+s.URL)
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// Set parses one --worker value and appends it.
func (w *WorkerFlags) Set(s string) error {
	e, err := ParseWorkerFlag(s)
	if err != nil {
		return err
	}
	for _, o := range *w {
		if o.Name == e.Name {
			return fmt.Errorf("worker %q: duplicate name %q", s, e.Name)
		}
	}
	*w = append(*w, e)
	return nil
}
