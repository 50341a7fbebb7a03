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
	register("version", command{summary: "print the version", run: runVersion})
}

func runVersion(_ context.Context, _ []string, _ io.Reader, stdout, _ io.Writer) int {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	fmt.Fprintf(stdout, "kvrouter %s %s %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return 0
}
