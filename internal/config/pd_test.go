package config

import (
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// TestPDOptions: the disaggregation options reach what each command
// builds, and bad ones are refused.
func TestPDOptions(t *testing.T) {
	a, _, err := LoadCommand[Agent](
		[]string{"--name", "p1", "--url", "http://127.0.0.1:9", "--role", "prefill", "--bootstrap-port", "8998"}, DefaultAgent, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ac, err := a.AgentConfig()
	if err != nil || ac.Record.Role != fleet.RolePrefill || ac.Record.BootstrapPort != 8998 {
		t.Errorf("agent record role %q port %d (%v), want prefill 8998", ac.Record.Role, ac.Record.BootstrapPort, err)
	}
	if _, _, err := LoadCommand[Agent]([]string{"--name", "p1", "--url", "http://127.0.0.1:9", "--role", "chef"}, DefaultAgent, Options{}); err == nil {
		t.Error("agent --role chef accepted")
	}

	m, _, err := LoadCommand[Mocker]([]string{"--disaggregation-mode", "decode", "--disaggregation-protocol", "sglang", "--kv-hold-timeout", "5s"}, DefaultMocker, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d := m.ServerConfig().Disagg; d.Mode != "decode" || d.Protocol != "sglang" || d.HoldTimeout != 5*time.Second || MockerRole(d.Mode) != fleet.RoleDecode {
		t.Errorf("mocker disaggregation %+v", d)
	}
	if _, _, err := LoadCommand[Mocker]([]string{"--disaggregation-mode", "both-ways"}, DefaultMocker, Options{}); err == nil {
		t.Error("mocker --disaggregation-mode both-ways accepted")
	}

	c, _, err := LoadCommand[Config]([]string{"--pd-protocol", "sglang", "--pd-bypass-tokens", "256", "--pd-prefill-timeout", "3s"}, Default, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p := c.FrontendConfig().PD; p.Protocol != "sglang" || p.BypassTokens != 256 || p.PrefillTimeout != 3*time.Second {
		t.Errorf("serve pd %+v", p)
	}
	if _, _, err := LoadCommand[Config]([]string{"--pd-protocol", "nixl"}, Default, Options{}); err == nil {
		t.Error("serve --pd-protocol nixl accepted")
	}

	u, _, err := LoadCommand[Up]([]string{"--prefill-workers", "1", "--decode-workers", "3"}, DefaultUp, Options{})
	if err != nil || u.FleetWorkers() != 4 {
		t.Errorf("up fleet %d workers (%v), want 4", u.FleetWorkers(), err)
	}
	if _, _, err := LoadCommand[Up]([]string{"--prefill-workers", "2"}, DefaultUp, Options{}); err == nil {
		t.Error("up with prefill workers and no decode workers accepted")
	}

	s, _, err := LoadCommand[Sim]([]string{"--prefill-workers", "3", "--decode-workers", "5", "--kv-transfer-bandwidth", "8"}, DefaultSim, Options{})
	if err != nil || s.Sim.Workers != 8 || s.Sim.Engine.KVTransferBandwidth != 8e9 {
		t.Errorf("sim fleet %d workers, bandwidth %v (%v); want 8 and 8e9", s.Sim.Workers, s.Sim.Engine.KVTransferBandwidth, err)
	}
}
