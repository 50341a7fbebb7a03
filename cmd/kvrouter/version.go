package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

func init() {
	register("version", command{summary: versionSummary, run: runVersion})
}

const versionSummary = "Print the version, the commit it was built from and the Go toolchain."

func runVersion(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) int {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprintln(stdout, helpText(versionSummary, "kvrouter version (or kvrouter --version)", ""))
			return 0
		}
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(version, bi))
	return 0
}

// versionLine describes the build: the version (from -ldflags, else the
// module's), the commit from the Go toolchain's VCS stamp (a build from a
// clone has it; `go build -buildvcs=false`, `go run` and tests have not),
// and the toolchain.
func versionLine(v string, bi *debug.BuildInfo) string {
	commit := "unknown (built without VCS information, e.g. -buildvcs=false)"
	if bi != nil {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			commit = rev
			if modified == "true" {
				commit += " (with uncommitted changes)"
			}
		}
	}
	return fmt.Sprintf("kvrouter %s\ncommit %s\n%s %s/%s", v, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
