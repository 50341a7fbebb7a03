// Command kvrouter is the one kvrouter binary: the router, its mock engine,
// the event agent, the simulator and benchmarks, chosen by subcommand.
// Each subcommand's options are a typed configuration of internal/config
// (flags, a --config YAML file and KVROUTER_* variables alike); this
// package parses nothing itself and only wires what the configuration
// names.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/kvrouter/kvrouter/internal/config"
)

// command is one subcommand. Run gets the arguments after the subcommand
// name and returns the process exit code.
type command struct {
	// summary says in one sentence what the command is for; it opens the
	// command's --help and its line in kvrouter's.
	summary string
	run     func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands maps subcommand names to their implementation. Each subcommand
// registers itself from its own file's init so that subcommands are added
// without touching this file.
var commands = map[string]command{}

func register(name string, c command) {
	if _, dup := commands[name]; dup {
		panic("kvrouter: subcommand registered twice: " + name)
	}
	commands[name] = c
}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	stop := interrupts(cancel, os.Stderr, func() { os.Exit(130) })
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	cancel()
	os.Exit(code)
}

// interrupts turns the first SIGINT/SIGTERM into a graceful stop (cancel;
// the router then says how many requests it waits for, and how long) and
// the second into exit, at once, for an operator who will not wait. stop
// restores the default handling.
func interrupts(cancel func(), stderr io.Writer, exit func()) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
		case <-done:
			return
		}
		fmt.Fprintln(stderr, "kvrouter: stopping gracefully; press Ctrl-C again to exit at once")
		cancel()
		select {
		case <-sigs:
		case <-done:
			return
		}
		fmt.Fprintln(stderr, "kvrouter: second interrupt: exiting now")
		exit()
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// run dispatches to a subcommand; split from main so tests can call it.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "-version", "--version", "-v":
		return runVersion(ctx, nil, stdin, stdout, stderr)
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kvrouter: unknown command %q\nRun 'kvrouter --help' for the commands.\n", args[0])
		return 2
	}
	return c.run(ctx, args[1:], stdin, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "kvrouter routes OpenAI requests across an LLM inference fleet to the worker whose KV cache holds the longest prefix.")
	fmt.Fprintln(w, "\nUsage: kvrouter <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, strings.TrimSuffix(commands[n].summary, "."))
	}
	fmt.Fprintln(w, "\nRun 'kvrouter <command> --help' for a command's flags; 'kvrouter --version' for the build.")
}

// load reads the configuration of the subcommand name (the words after
// "kvrouter") from args, the --config file and the environment. When it
// cannot go on it has printed why and returns ok false with the exit code:
// 0 after --help (written to stdout), 2 for a bad command line (the one
// error and a hint, never the whole flag list) or a refused value.
func load[T any, P interface {
	*T
	config.Command
}](name, usage string, args []string, defaults func() T, stdout, stderr io.Writer) (T, []string, int, bool) {
	cfg, rest, err := config.LoadCommand[T, P](args, defaults, config.Options{Name: name, Environ: os.Environ(), Output: stdout, Usage: usage, Args: acceptsArgs[name]})
	switch {
	case err == nil:
		return cfg, rest, 0, true
	case errors.Is(err, flag.ErrHelp):
		return cfg, nil, 0, false
	case errors.Is(err, config.ErrUsage):
		msg := strings.TrimPrefix(err.Error(), config.ErrUsage.Error()+": ")
		fmt.Fprintf(stderr, "kvrouter %s: %s\nRun 'kvrouter %s --help' for its flags.\n", name, msg, name)
	default:
		fmt.Fprintf(stderr, "kvrouter %s: %v\n", name, err)
	}
	return cfg, nil, 2, false
}

// acceptsArgs are the subcommands that take positional arguments.
var acceptsArgs = map[string]bool{"hash": true}

// helpText is a command's --help preamble: its one-sentence summary, the
// usage line, then more detail.
func helpText(summary, usageLine, detail string) string {
	s := summary + "\n\nUsage: " + usageLine
	if detail != "" {
		s += "\n\n" + detail
	}
	return s
}
