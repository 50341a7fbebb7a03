package config

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated option tables of docs/config.md")

// generated are the subcommands whose option tables in docs/config.md are
// generated from their flag sets (serve's and up's are written by hand and
// checked by TestEveryOptionDocumented).
var generated = []string{"agent", "mocker", "sim", "bench online", "bench index", "hash"}

// optionTable renders a command's options as a markdown table: flag,
// environment variable, default, meaning (with its unit).
func optionTable(name string) string {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	Commands()[name].Bind(fs)
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		def := "`" + f.DefValue + "`"
		if f.DefValue == "" {
			def = "(empty)"
		}
		usage := strings.ReplaceAll(f.Usage, "|", `\|`)
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", f.Name, EnvName(f.Name), def, usage)
	})
	return b.String()
}

func markers(name string) (begin, end string) {
	return "<!-- generated: kvrouter " + name + " options (go test ./internal/config -run TestCommandReference -update) -->\n",
		"<!-- end of generated: kvrouter " + name + " -->\n"
}

// TestCommandReference checks that docs/config.md holds, for every
// subcommand but serve and up, the table of all its options as its flag
// set defines them; -update rewrites the tables.
func TestCommandReference(t *testing.T) {
	const path = "../../docs/config.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, name := range generated {
		begin, end := markers(name)
		re := regexp.MustCompile(`(?s)` + regexp.QuoteMeta(begin) + `.*?` + regexp.QuoteMeta(end))
		want := begin + optionTable(name) + end
		got := re.FindString(doc)
		switch {
		case got == "":
			t.Errorf("docs/config.md has no generated table for kvrouter %s (markers %q)", name, strings.TrimSpace(begin))
		case got != want && *update:
			doc = strings.Replace(doc, got, want, 1)
		case got != want:
			t.Errorf("docs/config.md: the kvrouter %s table is stale; run go test ./internal/config -run TestCommandReference -update", name)
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUpOptionsDocumented: up's own options are in its hand-written table.
func TestUpOptionsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	serve := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := Default()
	c.Bind(serve)
	up := flag.NewFlagSet("up", flag.ContinueOnError)
	u := DefaultUp()
	u.Bind(up)
	up.VisitAll(func(f *flag.Flag) {
		if serve.Lookup(f.Name) == nil && !strings.Contains(string(b), "| `--"+f.Name+"` | `"+EnvName(f.Name)+"` |") {
			t.Errorf("docs/config.md does not document kvrouter up --%s", f.Name)
		}
	})
}
