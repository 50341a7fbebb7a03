package logtest_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/logtest"
)

// Lines written from many goroutines while another reads all arrive
// whole (run with -race).
func TestBufferConcurrentWriters(t *testing.T) {
	var b logtest.Buffer
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				fmt.Fprintf(&b, "g%d line %d\n", g, i)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			_ = b.String()
		}
	}()
	wg.Wait()
	<-done
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("%d lines, want 800", len(lines))
	}
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	for g := range 8 {
		for i := range 100 {
			if l := fmt.Sprintf("g%d line %d", g, i); !seen[l] {
				t.Fatalf("line %q missing or torn", l)
			}
		}
	}
}
