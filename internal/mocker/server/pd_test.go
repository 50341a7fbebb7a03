package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/poll"
)

func pdConfig(mode, protocol string) Config {
	c := testConfig()
	c.Disagg.Mode, c.Disagg.Protocol = mode, protocol
	c.Engine.KVBytesPerToken, c.Engine.KVTransferBandwidth = 1000, 1e9
	return c
}

func pdPrompt() string { return strings.Repeat("the decode worker pulls the prompt blocks ", 20) } // 140 words

type pdAnswer struct {
	completion
	KVTransferParams *struct {
		DoRemotePrefill bool    `json:"do_remote_prefill"`
		DoRemoteDecode  bool    `json:"do_remote_decode"`
		RemoteBlockIDs  []int64 `json:"remote_block_ids"`
		RemoteEngineID  string  `json:"remote_engine_id"`
		RemoteRequestID string  `json:"remote_request_id"`
		RemoteHost      string  `json:"remote_host"`
		RemotePort      int     `json:"remote_port"`
	} `json:"kv_transfer_params"`
}

// TestVLLMPrefillDecode: the NixlConnector flow between two mock workers
// over HTTP. The prefill worker answers one token with kv_transfer_params
// naming the prompt's blocks and keeps them; the decode worker given those
// parameters pulls and releases them, stores the received blocks (events
// on its local index) and decodes the full answer.
func TestVLLMPrefillDecode(t *testing.T) {
	p := start(t, pdConfig(ModePrefill, ProtocolVLLM))
	d := start(t, pdConfig(ModeDecode, ProtocolVLLM))
	code, b := post(t, p.url+"/v1/completions", map[string]any{"model": "mock-model", "prompt": pdPrompt(), "max_tokens": 1,
		"kv_transfer_params": map[string]any{"do_remote_decode": true, "do_remote_prefill": false}})
	var pa pdAnswer
	if code != 200 || json.Unmarshal(b, &pa) != nil || pa.KVTransferParams == nil {
		t.Fatalf("prefill: %d %s", code, b)
	}
	kv := pa.KVTransferParams
	if !kv.DoRemotePrefill || kv.DoRemoteDecode || len(kv.RemoteBlockIDs) != (140+15)/16 || kv.RemoteRequestID == "" {
		t.Fatalf("prefill kv_transfer_params %+v, want do_remote_prefill and %d blocks", kv, (140+15)/16)
	}
	u, _ := url.Parse(p.url)
	if kv.RemoteHost != u.Hostname() || strconv.Itoa(kv.RemotePort) != u.Port() {
		t.Errorf("remote %s:%d, want the prefill worker's address %s", kv.RemoteHost, kv.RemotePort, u.Host)
	}
	if p.w.Holds() != 1 {
		t.Fatalf("prefill worker holds %d prefills, want 1", p.w.Holds())
	}
	var params map[string]any
	_ = json.Unmarshal(b, &struct {
		P *map[string]any `json:"kv_transfer_params"`
	}{&params})
	code, b = post(t, d.url+"/v1/completions", map[string]any{"model": "mock-model", "prompt": pdPrompt(), "max_tokens": 5,
		"kv_transfer_params": params})
	var da completion
	if code != 200 || json.Unmarshal(b, &da) != nil || len(da.Choices) != 1 || da.Usage == nil || da.Usage.CompletionTokens != 5 {
		t.Fatalf("decode: %d %s", code, b)
	}
	if p.w.Holds() != 0 {
		t.Errorf("prefill worker still holds %d prefills after the pull", p.w.Holds())
	}
	if n := d.w.LocalIndex(0).Len(kvevent.TierDevice); n < 140/16 {
		t.Errorf("decode worker stored %d blocks, want at least the prompt's %d full blocks", n, 140/16)
	}
	// The same pull again finds nothing: computed locally, still served.
	code, b = post(t, d.url+"/v1/completions", map[string]any{"model": "mock-model", "prompt": pdPrompt() + " again", "max_tokens": 2,
		"kv_transfer_params": params})
	if code != 200 {
		t.Fatalf("decode with released blocks: %d %s", code, b)
	}
}

// TestVLLMHoldTimeout: blocks no decode worker pulls are freed after the
// hold timeout.
func TestVLLMHoldTimeout(t *testing.T) {
	c := pdConfig(ModePrefill, ProtocolVLLM)
	c.Disagg.HoldTimeout = 50 * time.Millisecond
	p := start(t, c)
	code, b := post(t, p.url+"/v1/completions", map[string]any{"model": "mock-model", "prompt": pdPrompt(), "max_tokens": 1,
		"kv_transfer_params": map[string]any{"do_remote_decode": true}})
	if code != 200 || !strings.Contains(string(b), "remote_block_ids") {
		t.Fatalf("prefill: %d %s", code, b)
	}
	if p.w.Holds() != 1 {
		t.Fatalf("holds %d prefills right after the answer, want 1", p.w.Holds())
	}
	poll.Until(t, 5*time.Second, func() bool { return p.w.Holds() == 0 }, "held blocks freed by the timeout")
}

// TestSGLangBootstrap: both hops sent at once with the same bootstrap
// room; the decode worker waits for the room, pulls, and answers in full;
// the prefill worker answers one token and keeps nothing afterwards.
func TestSGLangBootstrap(t *testing.T) {
	p := start(t, pdConfig(ModePrefill, ProtocolSGLang))
	d := start(t, pdConfig(ModeDecode, ProtocolSGLang))
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(p.url, "http://"))
	pn, _ := strconv.Atoi(port)
	body := map[string]any{"model": "mock-model", "prompt": pdPrompt(), "max_tokens": 6,
		"bootstrap_host": host, "bootstrap_port": pn, "bootstrap_room": uint64(1) << 62}
	var wg sync.WaitGroup
	var pc, dc int
	var pb, db []byte
	wg.Add(2)
	go func() { defer wg.Done(); dc, db = postNoFatal(d.url+"/v1/completions", body) }()
	go func() { defer wg.Done(); pc, pb = postNoFatal(p.url+"/v1/completions", body) }()
	wg.Wait()
	var pa, da completion
	if pc != 200 || json.Unmarshal(pb, &pa) != nil || pa.Usage == nil || pa.Usage.CompletionTokens != 1 {
		t.Fatalf("prefill: %d %s", pc, pb)
	}
	if dc != 200 || json.Unmarshal(db, &da) != nil || da.Usage == nil || da.Usage.CompletionTokens != 6 {
		t.Fatalf("decode: %d %s", dc, db)
	}
	poll.Until(t, 5*time.Second, func() bool { return p.w.Holds() == 0 }, "the prefill worker's blocks released")
	if n := d.w.LocalIndex(0).Len(kvevent.TierDevice); n < 140/16 {
		t.Errorf("decode worker stored %d blocks, want at least %d", n, 140/16)
	}
}

func postNoFatal(url string, body any) (int, []byte) {
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// FuzzPDBodies sends hostile PD fields and /kv/ bodies to a prefill
// worker of each protocol: no 5xx, no panic, and afterwards nothing is
// held longer than its hold timeout and a plain request still works.
func FuzzPDBodies(f *testing.F) {
	for _, s := range []string{`{"prompt":"a b","max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`,
		`{"prompt":"a","kv_transfer_params":{"do_remote_decode":true,"remote_block_ids":[1,2,-3]}}`,
		`{"prompt":"a","kv_transfer_params":null}`, `{"prompt":"a","kv_transfer_params":[1]}`,
		`{"prompt":"a","bootstrap_room":18446744073709551615,"bootstrap_host":"x","bootstrap_port":-1}`,
		`{"prompt":"a","bootstrap_room":-1}`, `{"prompt":["a","b"],"bootstrap_room":3}`,
		`{"request_id":"1"}`, `{"room":5,"wait_ms":-9}`, `{"room":5,"wait_ms":99999999999}`, `{}`, `[`} {
		for _, p := range []string{"/v1/completions", "/kv/pull", "/kv/release"} {
			f.Add(p, s, false)
			f.Add(p, s, true)
		}
	}
	base := map[bool]string{}
	for _, sglang := range []bool{false, true} {
		c := pdConfig(ModePrefill, map[bool]string{false: ProtocolVLLM, true: ProtocolSGLang}[sglang])
		c.Engine.NumGPUBlocks = 16
		c.Engine.SpeedupRatio = 1e6
		c.Disagg.HoldTimeout = 20 * time.Millisecond
		w, err := New(c)
		if err != nil {
			f.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- w.Serve(ctx, ln) }()
		f.Cleanup(func() {
			cancel()
			if err := <-errc; err != nil {
				f.Error(err)
			}
		})
		base[sglang] = "http://" + ln.Addr().String()
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	f.Cleanup(client.CloseIdleConnections)
	f.Fuzz(func(t *testing.T, path, body string, sglang bool) {
		switch path {
		case "/v1/completions", "/kv/pull", "/kv/release":
		default:
			return
		}
		if strings.Contains(body, "wait_ms") {
			return // a room waited on for as long as the body says is no defect
		}
		resp, err := client.Post(base[sglang]+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s %q: %v", path, body, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("%s %q: status %d %s", path, body, resp.StatusCode, b)
		}
		resp, err = client.Post(base[sglang]+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"still there","max_tokens":1}`))
		if err != nil {
			t.Fatalf("after %s %q: worker gone: %v", path, body, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("after %s %q: a plain request got %d", path, body, resp.StatusCode)
		}
	})
}
