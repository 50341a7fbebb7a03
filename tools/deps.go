//go:build tools

// Package tools pins the project's dependencies before every package
// that uses them exists, so parallel work never races on go.mod.
package tools

import (
	_ "github.com/ardanlabs/jinja"
	_ "github.com/dlclark/regexp2"
	_ "github.com/go-zeromq/zmq4"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/vmihailenco/msgpack/v5"
	_ "github.com/zeebo/xxh3"
	_ "go.uber.org/goleak"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/text/unicode/norm"
	_ "gonum.org/v1/plot"
	_ "pgregory.net/rapid"
)
