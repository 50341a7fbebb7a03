package config

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"

	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/frontend"
	"github.com/kvrouter/kvrouter/internal/mocker/server"
	"github.com/kvrouter/kvrouter/internal/sim"
)

// bindDisagg registers the mocker's disaggregation flags (docs/pd.md).
func bindDisagg(fs *flag.FlagSet, d *server.Disagg) {
	fs.StringVar(&d.Mode, "disaggregation-mode", d.Mode, "agg: whole requests; prefill: compute prompts and keep their KV for a decode worker; decode: receive a prompt's KV, then decode")
	fs.StringVar(&d.Protocol, "disaggregation-protocol", d.Protocol, "vllm: NixlConnector kv_transfer_params; sglang: bootstrap_host/port/room")
	fs.IntVar(&d.BootstrapPort, "disaggregation-bootstrap-port", d.BootstrapPort, "an SGLang prefill worker's bootstrap port, worker k on port + k (0: the HTTP port)")
	fs.DurationVar(&d.HoldTimeout, "kv-hold-timeout", d.HoldTimeout, "free a prefill's kept KV blocks no decode worker pulled after this")
}

// bindPD registers the front door's disaggregated-serving flags.
func bindPD(fs *flag.FlagSet, p *frontend.PDConfig) {
	fs.StringVar(&p.Protocol, "pd-protocol", p.Protocol, "disaggregated fleets: vllm (kv_transfer_params, prefill hop first) or sglang (bootstrap room, both hops at once)")
	fs.IntVar(&p.BypassTokens, "pd-bypass-tokens", p.BypassTokens, "skip the prefill hop when the best prefill worker would compute fewer uncached prompt tokens than this (0: never)")
	fs.DurationVar(&p.PrefillTimeout, "pd-prefill-timeout", p.PrefillTimeout, "bound on a disaggregated request's prefill hop")
}

// MockerRole is the registry role of a mock worker in disaggregation mode
// mode.
func MockerRole(mode string) fleet.Role {
	switch mode {
	case server.ModePrefill:
		return fleet.RolePrefill
	case server.ModeDecode:
		return fleet.RoleDecode
	}
	return fleet.RoleBoth
}

// bindUpPD registers up's disaggregated-fleet flags.
func bindUpPD(fs *flag.FlagSet, u *Up) {
	fs.IntVar(&u.PrefillWorkers, "prefill-workers", u.PrefillWorkers, "mock prefill workers of a disaggregated fleet (with --decode-workers; replaces --mock-workers)")
	fs.IntVar(&u.DecodeWorkers, "decode-workers", u.DecodeWorkers, "mock decode workers of a disaggregated fleet (with --prefill-workers)")
}

// validatePD checks the disaggregated fleet's sizes.
func (u *Up) validatePD() error {
	p, d := u.PrefillWorkers, u.DecodeWorkers
	switch {
	case p < 0 || d < 0 || p+d > 256:
		return errors.New("--prefill-workers and --decode-workers must be in [0, 256] together")
	case (p == 0) != (d == 0):
		return errors.New("a disaggregated fleet needs both --prefill-workers and --decode-workers")
	}
	return nil
}

// FleetWorkers is the number of mock workers up starts: prefill and
// decode workers when disaggregated, else --mock-workers.
func (u *Up) FleetWorkers() int {
	if u.PrefillWorkers > 0 {
		return u.PrefillWorkers + u.DecodeWorkers
	}
	return u.MockWorkers
}

// bindSimPD registers sim's disaggregated-fleet flags.
func bindSimPD(fs *flag.FlagSet, c *sim.Config) {
	fs.IntVar(&c.PrefillWorkers, "prefill-workers", c.PrefillWorkers, "prefill engines of a disaggregated fleet (with --decode-workers; they replace --workers)")
	fs.IntVar(&c.DecodeWorkers, "decode-workers", c.DecodeWorkers, "decode engines of a disaggregated fleet (with --prefill-workers)")
	fs.IntVar(&c.BypassTokens, "pd-bypass-tokens", c.BypassTokens, "skip the prefill hop of a prompt with fewer uncached tokens than this on the best prefill engine (0: never)")
	fs.IntVar(&c.Engine.KVBytesPerToken, "kv-bytes-per-token", c.Engine.KVBytesPerToken, "KV cache bytes per token (transfer time between prefill and decode engines)")
	fs.Func("kv-transfer-bandwidth", fmt.Sprintf("KV transfer bandwidth between engines, GB/s (default %g)", c.Engine.KVTransferBandwidth/1e9), func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			return errors.New("want a positive number of GB/s")
		}
		c.Engine.KVTransferBandwidth = f * 1e9
		return nil
	})
}

// simWorkers is the simulated fleet's size: prefill and decode engines
// when disaggregated, else --workers.
func simWorkers(c sim.Config) int {
	if c.PrefillWorkers > 0 || c.DecodeWorkers > 0 {
		return c.PrefillWorkers + c.DecodeWorkers
	}
	return c.Workers
}
