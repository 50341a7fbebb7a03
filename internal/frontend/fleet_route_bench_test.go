package frontend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"
)

// BenchmarkFleetRoute is POST /v1/route (a dry-run decision with its
// full explanation, a row per worker) for 1 k-token prompts with 64, 256
// and 1,024 workers, and reports the response's size.
func BenchmarkFleetRoute(b *testing.B) {
	for _, n := range []int{64, 256, 1024} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			front, client := fleetFront(b, n)
			prompts := benchPrompts(b, 64, 1024)
			bodies := make([][]byte, len(prompts))
			for i, p := range prompts {
				bodies[i], _ = json.Marshal(map[string]any{"model": testModel, "prompt": p})
			}
			b.ReportAllocs()
			i, size := 0, 0
			for b.Loop() {
				resp, err := client.Post(front.URL+"/v1/route", "application/json", bytes.NewReader(bodies[i%len(bodies)]))
				if err != nil {
					b.Fatal(err)
				}
				m, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
				size = int(m)
				i++
			}
			b.ReportMetric(float64(size), "bytes")
		})
	}
}
