package frontend

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/router"
)

// Models is optionally given to the front door (Deps.Models) when the
// fleet serves more models than the configured one: what it knows of each
// model besides the default (Config.Model, with Deps.Tokenizer and
// Deps.ChatTemplate). The Router is then the per-model pools
// (*router.Pools): requests carry their model in router.Request.Model.
// All methods must be safe for concurrent use and must not block.
type Models interface {
	// Model returns a model's tokenizer and chat template (either nil when
	// the router has none for it), and whether the router knows the model.
	Model(name string) (ModelFiles, bool)
	// Routable returns the models, the default one included, that have
	// at least one routable worker (not DOWN, not REFUSED), sorted.
	Routable() []string
	// ModelOf returns the model worker id serves ("" for the default).
	ModelOf(id kvevent.WorkerID) (string, bool)
	// Adapter reports whether name is a LoRA adapter some worker has
	// loaded, with its base model ("" for the default) and the workers
	// that have it loaded now.
	Adapter(name string) (base string, loaded []kvevent.WorkerID, ok bool)
	// AdapterMissing says worker id answered 404 to a request for
	// adapter name: what it has loaded is to be learned again. It must
	// not block.
	AdapterMissing(id kvevent.WorkerID, name string)
	// Adapters lists the adapters loaded on at least one routable
	// worker, sorted.
	Adapters() []string
}

var _ Router = (*router.Pools)(nil)

// ModelFiles is what the front door needs to turn a model's requests
// into token ids.
type ModelFiles struct {
	// Tokenizer encodes the model's prompts; nil routes its text prompts
	// by a hash of the text (approximate; token-id prompts are exact).
	Tokenizer Tokenizer
	// ChatTemplate renders its chat requests; nil hashes the messages as
	// sent.
	ChatTemplate ChatTemplate
}

// textNamespace salts the hashes of prompts routed by their text (a model
// without a tokenizer): no engine's block can match them.
const textNamespace = "kvrouter:text-prefix\x00"

// parsers caches the prompt parsers of the models besides the default.
type parsers struct {
	mu sync.Mutex
	m  map[string]*promptParser
}

// parserFor returns the parser of the requested model and the model's
// pool name ("" for the default model or an alias). Errors wrap
// ErrUnknownModel.
func (f *Frontend) parserFor(name string) (*promptParser, string, error) {
	err := f.parser.checkModel(name)
	if err == nil || f.models == nil {
		return &f.parser, "", err
	}
	files, ok := f.models.Model(name)
	if !ok {
		base, _, isAdapter := f.models.Adapter(name)
		if !isAdapter || base == name {
			return nil, "", err
		}
		// An adapter: its base model's tokenizer and pool.
		if base == "" {
			return &f.parser, "", nil
		}
		if files, ok = f.models.Model(base); !ok {
			return nil, "", err
		}
		name = base
	}
	f.extra.mu.Lock()
	defer f.extra.mu.Unlock()
	if p, ok := f.extra.m[name]; ok {
		return p, name, nil
	}
	if f.extra.m == nil {
		f.extra.m = map[string]*promptParser{}
	}
	if len(f.extra.m) >= maxModelParsers {
		return nil, "", fmt.Errorf("the model %q: more than %d models: %w", name, maxModelParsers, ErrUnknownModel)
	}
	p := &promptParser{model: name, tok: files.Tokenizer, tmpl: files.ChatTemplate,
		maxTokens: f.parser.maxTokens, maxOutput: f.parser.maxOutput}
	if p.tok != nil {
		p.maxTokenBytes = longestToken(p.tok)
	}
	f.extra.m[name] = p
	return p, name, nil
}

// maxModelParsers bounds the parsers kept (one per model the router
// knows; the directory bounds the models, this bounds the cache).
const maxModelParsers = 4096

// textTokens turns text into the pseudo token ids a model without a
// tokenizer is routed by: its UTF-8 bytes, four to an id (about one id
// per BPE token of English text), the last id zero-padded. The prompt's
// blocks are then hashed like any other, salted with textNamespace.
func textTokens(text string) []uint32 {
	ids := make([]uint32, 0, (len(text)+3)/4)
	for len(text) >= 4 {
		ids = append(ids, binary.LittleEndian.Uint32([]byte(text[:4])))
		text = text[4:]
	}
	if len(text) > 0 {
		var b [4]byte
		copy(b[:], text)
		ids = append(ids, binary.LittleEndian.Uint32(b[:]))
	}
	return ids
}

// approxText reports whether p routes text by textTokens.
func (p *promptParser) approxText() bool { return p.tok == nil }

// approxChat reports whether p's chat prompts are approximate: no
// tokenizer, or no chat template (the conversation is then encoded as
// sent, which is not what the engine computes).
func (p *promptParser) approxChat() bool { return p.tok == nil || p.tmpl == nil }

// loraOf returns the LoRA adapter a request's model names, or "".
func (f *Frontend) loraOf(name string) string {
	if f.models == nil || f.parser.checkModel(name) == nil {
		return ""
	}
	if _, ok := f.models.Model(name); ok {
		return ""
	}
	if _, _, ok := f.models.Adapter(name); ok {
		return name
	}
	return ""
}

// adapterWorkers restricts an adapter's request to the workers that have
// it loaded, when any has; nil (every worker of the base model, which
// would load it) otherwise.
func (f *Frontend) adapterWorkers(lora string) []kvevent.WorkerID {
	if lora == "" || f.models == nil {
		return nil
	}
	_, loaded, _ := f.models.Adapter(lora)
	return loaded
}

// adapterMissing passes a worker's 404 to an adapter request on.
func (f *Frontend) adapterMissing(id kvevent.WorkerID, lora string) {
	if lora != "" && f.models != nil {
		f.models.AdapterMissing(id, lora)
	}
}

// routerRequest is the router's request for attempt id of ex: an
// adapter's blocks are hashed with its name (as the engine does), and it
// is placed on a worker that has it loaded when there is one.
func (f *Frontend) routerRequest(ex *exchange, id string, expl []router.Explanation) router.Request {
	req := router.Request{ID: id, Model: ex.model, Tokens: ex.tokens, LoRAName: ex.lora, Namespace: ex.salt,
		ExpectedOutputTokens: ex.expected, Explanation: expl, AllowedWorkers: f.adapterWorkers(ex.lora)}
	if ex.approx {
		req.Namespace = textNamespace + ex.salt
		req.RecordDecision = true
	}
	return req
}

// modelIDs lists the models /v1/models shows: the default model and its
// aliases, then every other model with a routable worker; with Deps.Models
// set, the default model and its aliases too only while it has one.
func (f *Frontend) modelIDs() []string {
	ids := append([]string{f.cfg.Model}, f.cfg.Aliases...)
	if f.models == nil {
		return ids
	}
	// A fleet of models lists only those with a routable worker, the
	// default (and its aliases) included: a client never sees a model it
	// would get a 503 for.
	routable := f.models.Routable()
	if !slices.Contains(routable, "") && !slices.Contains(routable, f.cfg.Model) {
		ids = nil
	}
	seen := map[string]bool{f.cfg.Model: true}
	for _, id := range ids {
		seen[id] = true
	}
	var more []string
	for _, m := range routable {
		if m != "" && !seen[m] && utf8.ValidString(m) {
			seen[m] = true
			more = append(more, m)
		}
	}
	for _, a := range f.models.Adapters() {
		if !seen[a] && utf8.ValidString(a) {
			seen[a] = true
			more = append(more, a)
		}
	}
	sort.Strings(more)
	return append(ids, more...)
}

// modelView is one model's row in /v1/workers.
type modelView struct {
	Model     string `json:"model"`
	Tokenizer bool   `json:"tokenizer"`
	// TextRouting says how text prompts are routed: "tokenized", or
	// "approximate" (by a hash of the text prefix: no tokenizer).
	TextRouting string `json:"text_routing"`
}

// modelViews describes the models besides the default, for /v1/workers
// (nil without Models).
func (f *Frontend) modelViews(workers []workerJSON) []modelView {
	if f.models == nil {
		return nil
	}
	names := map[string]bool{}
	for _, w := range workers {
		if w.Model != "" && w.Model != f.cfg.Model {
			names[w.Model] = true
		}
	}
	out := []modelView{{Model: f.cfg.Model, Tokenizer: true, TextRouting: "tokenized"}}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		v := modelView{Model: n, TextRouting: "approximate"}
		if files, ok := f.models.Model(n); ok && files.Tokenizer != nil {
			v.Tokenizer, v.TextRouting = true, "tokenized"
		}
		out = append(out, v)
	}
	return out
}

// workerModel is worker id's model name for /v1/workers.
func (f *Frontend) workerModel(id kvevent.WorkerID) string {
	if f.models == nil {
		return ""
	}
	m, ok := f.models.ModelOf(id)
	if !ok {
		return ""
	}
	if m == "" {
		return f.cfg.Model
	}
	return m
}

// pooled is implemented by a Router made of per-model pools
// (*router.Pools).
type pooled interface {
	Pool(model string) (*router.Router, bool)
}

var _ pooled = (*router.Pools)(nil)

// poolBlockSize is the block size of model pool's pool.
func (f *Frontend) poolBlockSize(pool string) int {
	if pr, ok := f.router.(pooled); ok && pool != "" {
		if r, ok := pr.Pool(pool); ok {
			return r.Config().BlockSize
		}
	}
	return f.blockSize
}

// inPool reports whether worker id serves model pool (always, without
// Models).
func (f *Frontend) inPool(id kvevent.WorkerID, pool string) bool {
	if f.models == nil {
		return true
	}
	m, ok := f.models.ModelOf(id)
	return ok && (m == pool || (pool == "" && m == f.cfg.Model))
}
