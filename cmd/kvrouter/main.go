// Command kvrouter is the one kvrouter binary: the router, its mock engine,
// the event agent, the simulator and benchmarks, chosen by subcommand.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. Run gets the arguments after the subcommand
// name and returns the process exit code.
type command struct {
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand; split from main so tests can call it.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kvrouter: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	return c.run(ctx, args[1:], stdin, stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "kvrouter — a KV-cache-aware router for LLM inference fleets")
	fmt.Fprintln(w, "\nUsage: kvrouter <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'kvrouter <command> -h' for a command's flags.")
}
