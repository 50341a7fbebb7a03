package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/kvrouter/kvrouter/internal/fleet"
)

// MaxFileBytes caps the size of a config file.
const MaxFileBytes = 1 << 20

// ErrUsage wraps a command line the flag parser refuses (an unknown flag,
// a malformed value, a stray argument): the caller prints it with a hint
// to --help, not the whole flag list.
var ErrUsage = errors.New("bad command line")

// Command is one subcommand's typed configuration: Bind registers its
// options as flags writing into the receiver (whose current values are the
// defaults shown by --help), Validate checks the values once every layer is
// applied.
type Command interface {
	Bind(fs *flag.FlagSet)
	Validate() error
}

// Options tell Load where the layers come from.
type Options struct {
	// Name is the command name shown in usage and errors ("serve",
	// "bench online").
	Name string
	// Environ is the environment as "KEY=value" strings (os.Environ());
	// nil means none.
	Environ []string
	// Output receives the help text on -h/--help; nil discards it.
	Output io.Writer
	// Defaults returns the starting values of Load; nil means Default.
	Defaults func() Config
	// Usage, when set, is printed before the flag list on -h. Its first
	// line says in one sentence what the command is for.
	Usage string
	// Args accepts positional arguments after the flags (returned by
	// LoadCommand); without it they are an ErrUsage error.
	Args bool
}

// Load builds the `kvrouter serve` configuration from defaults, the YAML
// file named by --config (or KVROUTER_CONFIG), KVROUTER_* environment
// variables and the flags in args, in that order of precedence, and
// validates it once. See LoadCommand.
func Load(args []string, o Options) (Config, error) {
	defaults := o.Defaults
	if defaults == nil {
		defaults = Default
	}
	c, _, err := LoadCommand(args, defaults, o)
	return c, err
}

// LoadCommand builds any subcommand's configuration T from defaults(),
// the YAML file named by --config (or KVROUTER_CONFIG), KVROUTER_*
// environment variables and the flags in args, later layers winning, and
// validates it once. It returns the positional arguments when o.Args is
// set. On -h it writes the help to o.Output and returns flag.ErrHelp; a
// command line the parser refuses is an ErrUsage error, a value refused by
// a check an ErrInvalid one, both naming the key and where it came from.
func LoadCommand[T any, P interface {
	*T
	Command
}](args []string, defaults func() T, o Options) (T, []string, error) {
	var zero T
	// First pass: the flags alone, on the defaults, to find --config and
	// refuse a bad command line before reading anything (and so that -h
	// shows the defaults, never a secret from the environment).
	probe := defaults()
	var probeFile string
	pfs := newFlagSet(o, P(&probe), &probeFile)
	if err := pfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(o, pfs)
			return zero, nil, err
		}
		return zero, nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if pfs.NArg() > 0 && !o.Args {
		return zero, nil, fmt.Errorf("%w: unexpected arguments %s", ErrUsage, quoteList(pfs.Args()))
	}
	env := envMap(o.Environ)
	file := pfs.Lookup("config").Value.String()
	if !isSet(pfs, "config") {
		file = env[EnvName("config")]
	}

	c := defaults()
	var cFile string
	fs := newFlagSet(o, P(&c), &cFile)
	if file != "" {
		b, err := readFile(file)
		if err != nil {
			return zero, nil, err
		}
		if err := applyYAML(fs, b); err != nil {
			return zero, nil, fmt.Errorf("%w: config file %s: %w", ErrInvalid, file, err)
		}
	}
	if err := applyEnv(fs, env); err != nil {
		return zero, nil, err
	}
	if err := fs.Parse(args); err != nil {
		return zero, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if f, ok := any(&c).(interface{ setFile(string) }); ok {
		f.setFile(file)
	}
	if err := P(&c).Validate(); err != nil {
		if !errors.Is(err, ErrInvalid) {
			err = fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return zero, nil, err
	}
	return c, fs.Args(), nil
}

// newFlagSet binds c's options, and --config when c has none of its own.
// Parse errors are returned, never printed: the caller prints one line.
func newFlagSet(o Options, c Command, file *string) *flag.FlagSet {
	fs := flag.NewFlagSet(o.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	c.Bind(fs)
	if fs.Lookup("config") == nil {
		fs.StringVar(file, "config", "", configFlagUsage)
	}
	return fs
}

const configFlagUsage = "YAML config file; its keys are these flag names (env KVROUTER_CONFIG)"

// writeHelp prints the command's help: its usage text, then every flag.
func writeHelp(o Options, fs *flag.FlagSet) {
	out := o.Output
	if out == nil {
		return
	}
	if o.Usage != "" {
		fmt.Fprintln(out, strings.TrimRight(o.Usage, "\n")+"\n")
	}
	fmt.Fprintf(out, "Flags (each also a key of the --config YAML file and a KVROUTER_<NAME> environment variable; flags win):\n\n")
	fs.SetOutput(out)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

func envMap(environ []string) map[string]string {
	m := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, "KVROUTER_") {
			m[k] = v
		}
	}
	return m
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: reading config file: %w", ErrInvalid, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: reading config file %s: %w", ErrInvalid, path, err)
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%w: config file %s is larger than %d bytes", ErrInvalid, path, MaxFileBytes)
	}
	return b, nil
}

// applyEnv sets every flag that has a KVROUTER_ variable. Unknown KVROUTER_
// variables are errors: a misspelt variable must not be silently ignored.
func applyEnv(fs *flag.FlagSet, env map[string]string) error {
	known := map[string]bool{}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := EnvName(f.Name)
		known[name] = true
		v, ok := env[name]
		if !ok || f.Name == "config" {
			return
		}
		if f.Name == "worker" {
			for w := range strings.SplitSeq(v, ";") {
				if strings.TrimSpace(w) == "" {
					continue
				}
				if err := f.Value.Set(strings.TrimSpace(w)); err != nil {
					errs = append(errs, fmt.Errorf("%w: %s: %w", ErrInvalid, name, err))
				}
			}
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s=%q: %w", ErrInvalid, name, v, err))
		}
	})
	var unknown []string
	other := knownEnv()
	for k := range env {
		// A variable another subcommand reads (KVROUTER_API_KEYS in the
		// shell of `kvrouter bench`) is not this one's business; one no
		// subcommand reads is a typo.
		if !known[k] && !other[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		errs = append(errs, fmt.Errorf("%w: unknown environment variable(s) %s", ErrInvalid, strings.Join(unknown, ", ")))
	}
	return errors.Join(errs...)
}

// applyYAML sets the flags named by the document's top-level keys. Scalars
// are parsed by the flag itself; a list of scalars is joined with commas
// (for list options); `workers:` is a list of worker entries whose unknown
// keys are refused.
func applyYAML(fs *flag.FlagSet, b []byte) error {
	var doc yaml.Node
	d := yaml.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file
		}
		return err
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: the document must be a mapping of option names to values", root.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		if seen[key] {
			return fmt.Errorf("line %d: key %q given twice", k.Line, key)
		}
		seen[key] = true
		if key == "config" {
			return fmt.Errorf("line %d: key \"config\" cannot be set inside a config file", k.Line)
		}
		name := key
		if static := fs.Lookup("worker") != nil; static {
			switch key {
			case "workers":
				name = "worker" // the list's key is plural; the flag is repeated
			case "worker":
				return fmt.Errorf("line %d: the static worker list is written \"workers:\"", k.Line)
			}
		} else if key == "workers" && v.Kind == yaml.SequenceNode {
			return fmt.Errorf("line %d: a static worker list is for kvrouter serve; this command starts its own workers (mock-workers: N)", k.Line)
		}
		f := fs.Lookup(name)
		if f == nil {
			return fmt.Errorf("line %d: unknown key %q (keys are flag names, see docs/config.md)", k.Line, key)
		}
		if err := setFromNode(f, v); err != nil {
			return fmt.Errorf("line %d: %s: %w", v.Line, key, err)
		}
	}
	return nil
}

func setFromNode(f *flag.Flag, v *yaml.Node) error {
	if f.Name == "worker" {
		return setWorkers(f, v)
	}
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return nil
		}
		return f.Value.Set(v.Value)
	case yaml.SequenceNode:
		if _, ok := f.Value.(listFlag); !ok {
			return errors.New("a list is not accepted here")
		}
		var parts []string
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: list entries must be plain values", e.Line)
			}
			if strings.Contains(e.Value, ",") {
				return fmt.Errorf("line %d: entries cannot contain commas", e.Line)
			}
			parts = append(parts, e.Value)
		}
		return f.Value.Set(strings.Join(parts, ","))
	default:
		return errors.New("want a plain value")
	}
}

// setWorkers appends the worker entries of a `worker:` list, rejecting
// unknown keys the way the static list parser does.
func setWorkers(f *flag.Flag, v *yaml.Node) error {
	wf, ok := f.Value.(*fleet.WorkerFlags)
	if !ok {
		return errors.New("internal: worker flag has an unexpected type")
	}
	if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		return errors.New("want a list of workers")
	}
	wrapped := yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Value: "workers"}, v}}
	b, err := yaml.Marshal(&wrapped)
	if err != nil {
		return err
	}
	ws, err := fleet.ParseStaticYAML(bytes.NewReader(b))
	if err != nil {
		return err
	}
	for _, w := range ws {
		for _, o := range *wf {
			if o.Name == w.Name {
				return fmt.Errorf("duplicate worker name %q", w.Name)
			}
		}
		*wf = append(*wf, w)
	}
	return nil
}
