package service

import (
	"fmt"
	"slices"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/fleet"
	"github.com/kvrouter/kvrouter/internal/frontend"
	"github.com/kvrouter/kvrouter/internal/kvevent"
	"github.com/kvrouter/kvrouter/internal/modelfiles"
	"github.com/kvrouter/kvrouter/internal/router"
)

// catalog is the front door's view of the models besides the default
// (frontend.Models): the tokenizer files of the configured ones (--model
// NAME=DIR), and every model a worker declared, which has a pool.
type catalog struct {
	def      string
	files    map[string]frontend.ModelFiles
	pools    *router.Pools
	dir      *fleet.Directory
	adapters *adapterSet
}

var _ frontend.Models = (*catalog)(nil)

// loadCatalog loads the tokenizer files of cfg's further models.
func loadCatalog(cfg config.Config) (*catalog, error) {
	c := &catalog{def: cfg.Model, files: map[string]frontend.ModelFiles{}}
	for _, m := range cfg.Models {
		var f frontend.ModelFiles
		if m.TokenizerDir != "" {
			mf, err := modelfiles.LoadDir(m.TokenizerDir)
			if err != nil {
				return nil, fmt.Errorf("model %q: %w", m.Name, err)
			}
			f.Tokenizer = mf.Tokenizer
			if mf.Template != nil { // a nil *Template must not become a non-nil interface
				f.ChatTemplate = mf.Template
			}
		}
		c.files[m.Name] = f
	}
	return c, nil
}

// bind gives the catalog the pools, the directory and the adapters it
// reports on.
func (c *catalog) bind(p *router.Pools, d *fleet.Directory, a *adapterSet) {
	c.pools, c.dir, c.adapters = p, d, a
}

// Model implements frontend.Models: a configured model, or one a worker
// declared (no tokenizer then).
func (c *catalog) Model(name string) (frontend.ModelFiles, bool) {
	if f, ok := c.files[name]; ok {
		return f, true
	}
	if name == "" || name == c.def {
		return frontend.ModelFiles{}, false // the default is the front door's own
	}
	_, ok := c.pools.Pool(name)
	return frontend.ModelFiles{}, ok
}

// routable returns the workers that are neither DOWN nor REFUSED.
func (c *catalog) routable() map[kvevent.WorkerID]bool {
	infos, down := c.pools.Workers()
	out := make(map[kvevent.WorkerID]bool, len(infos))
	for i, w := range infos {
		if down[i] {
			continue
		}
		if fw, ok := c.dir.Get(w.ID); ok && (fw.Status.State == fleet.StateDown || fw.Status.State == fleet.StateRefused) {
			continue
		}
		out[w.ID] = true
	}
	return out
}

// Routable implements frontend.Models: the models with a worker that is
// neither DOWN nor REFUSED.
func (c *catalog) Routable() []string {
	var out []string
	for id := range c.routable() {
		m, ok := c.pools.ModelOf(id)
		if ok && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// Adapter implements frontend.Models: an adapter some worker has loaded
// (per its /v1/models), its base model (the first such worker's), and
// the routable workers of that model that have it loaded.
func (c *catalog) Adapter(name string) (string, []kvevent.WorkerID, bool) {
	holders := c.adapters.holders(name)
	if len(holders) == 0 {
		return "", nil, false
	}
	base, _ := c.ModelOf(holders[0])
	ok := c.routable()
	var loaded []kvevent.WorkerID
	for _, id := range holders {
		if m, _ := c.ModelOf(id); m == base && ok[id] {
			loaded = append(loaded, id)
		}
	}
	return base, loaded, true
}

// AdapterMissing implements frontend.Models: the worker is read again.
func (c *catalog) AdapterMissing(id kvevent.WorkerID, _ string) { c.adapters.kick(id) }

// Adapters implements frontend.Models.
func (c *catalog) Adapters() []string {
	ok := c.routable()
	var out []string
	for name, ids := range c.adapters.all() {
		if slices.ContainsFunc(ids, func(id kvevent.WorkerID) bool { return ok[id] }) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// ModelOf implements frontend.Models ("" for the default model).
func (c *catalog) ModelOf(id kvevent.WorkerID) (string, bool) {
	m, ok := c.pools.ModelOf(id)
	if m == c.def {
		m = ""
	}
	return m, ok
}
