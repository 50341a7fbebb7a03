package config

import (
	"flag"
	"testing"
)

// FuzzApplyYAML feeds arbitrary documents to the file layer: it must return
// an error or set values, never panic.
func FuzzApplyYAML(f *testing.F) {
	for _, s := range []string{
		"", "port: 1\n", "workers:\n  - name: w\n    url: http://h:1\n", "api-keys: [a, b]\n",
		"- x\n", "port: [1]\n", "workers: 3\n", "{a: {b: c}}", "router-temperature: .nan\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c := Default()
		fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
		c.Bind(fs)
		if applyYAML(fs, b) == nil {
			_ = c.Validate()
		}
	})
}
