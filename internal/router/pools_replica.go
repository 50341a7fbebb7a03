package router

// Replica sync over every pool: Pools offers the same hooks as Router
// (SetObserver, SetShadows, ApplyRemote, Booked), with each lifecycle event
// naming its pool in LifecycleEvent.Model.

// observerFor returns the observer of model name's pool: p.observer with
// the event stamped with the model ("" for the default model, so that a
// single-model fleet's events are those of a lone Router). mu held.
func (p *Pools) observerFor(name string) Observer {
	o := p.observer
	if o == nil {
		return nil
	}
	if name == p.def {
		return o
	}
	return func(ev LifecycleEvent) {
		ev.Model = name
		o(ev)
	}
}

// SetObserver replaces the observer of every pool's local lifecycle
// events, pools made later included (nil turns it off); each event names
// its pool in Model ("" for the default model's).
func (p *Pools) SetObserver(o Observer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observer = o
	for name, r := range p.pools {
		r.SetObserver(p.observerFor(name))
	}
}

// SetShadows attaches replica sync's shadow booking to every pool's Route,
// pools made later included (nil detaches it).
func (p *Pools) SetShadows(s Shadows) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shadows = s
	for _, r := range p.pools {
		r.SetShadows(s)
	}
}

// ApplyRemote applies another router's lifecycle event to the pool its
// Model names ("" is the default model's; see Router.ApplyRemote). A
// MarkPrefillCompleted or Free without a model goes to the pool that books
// the request, the default pool first. An event for a model no pool serves
// is counted (Stats.RemoteUnknownModel) and dropped: a peer's claim never
// makes a pool.
func (p *Pools) ApplyRemote(ev LifecycleEvent) bool {
	p.mu.RLock()
	r, ok := p.pools[p.name(ev.Model)]
	p.mu.RUnlock()
	if !ok {
		p.unknownRemote.Add(1)
		return false
	}
	if ev.Model == "" && ev.Kind != AddRequest && !r.Booked(ev.RequestID) {
		for _, o := range p.all() {
			if o != r && o.Booked(ev.RequestID) {
				r = o
				break
			}
		}
	}
	return r.ApplyRemote(ev)
}

// Booked reports whether request id (local or another router's) is booked
// in any pool.
func (p *Pools) Booked(id string) bool {
	for _, r := range p.all() {
		if r.Booked(id) {
			return true
		}
	}
	return false
}
