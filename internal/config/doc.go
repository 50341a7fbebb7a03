// Package config is kvrouter's one typed configuration: what every
// subcommand runs with (Config for `kvrouter serve`, Up, Agent, Mocker,
// Sim, BenchOnline, BenchIndex and Hash for the others), where each value
// comes from, and the checks it must pass before anything starts. Every
// subcommand is loaded by the same LoadCommand, so cmd/kvrouter parses
// nothing itself.
//
// Values are layered, later layers winning: the documented defaults, then a
// YAML file (--config or KVROUTER_CONFIG), then environment variables
// (KVROUTER_ followed by the flag name in upper snake case, e.g.
// KVROUTER_ROUTER_TEMPERATURE), then command-line flags. One name is used
// everywhere: a YAML key is the flag's name, so an option documented once in
// docs/config.md is spelled the same way in all three places. Flag names
// follow Dynamo's where Dynamo has the option (--router-temperature,
// --kv-overlap-score-credit, --block-size, ...), so Dynamo users feel at
// home.
//
// The static worker list is the exception to "later wins": workers from the
// file's `workers:` list, from KVROUTER_WORKER (entries separated by ';')
// and from repeated --worker flags are all kept; a name used twice is an
// error.
//
// Unknown YAML keys, unknown worker keys, malformed values and values out of
// range are errors that name the key and its source: a typo must never
// silently fall back to a default. A KVROUTER_ variable is refused only
// when no subcommand reads it: the shell of `kvrouter bench` may well
// export serve's. Validate runs once, after all layers.
//
// Help (-h, --help) goes to Options.Output, the command's stdout; a command
// line the flag parser refuses is an ErrUsage error, printed by the caller
// as one line and a hint to --help, never with the whole flag list.
package config
