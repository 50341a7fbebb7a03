// Package deploycheck holds only tests: it keeps deploy/ (the Kubernetes
// manifests and the Grafana dashboard) honest against the code.
//
// Why: a manifest is code that no compiler reads. A renamed flag, a typo in
// an argument, a probe on the wrong path or a dashboard panel on a metric
// that no longer exists would only show up in a cluster. The tests parse every
// manifest under deploy/, find each container that runs the kvrouter image,
// and give its arguments to the real flag parser of that subcommand (the
// built binary, and for `serve` also internal/config.Load with the
// container's KVROUTER_* environment, which runs the full validation). They
// check probes, security contexts, resources and Service ports, and that every
// metric the dashboard queries is one the router or mock engine registers.
//
// Manifests write kvrouter flags as --name=value (a bare --name for a
// boolean) so that every argument is unambiguously a flag.
package deploycheck
