//go:build !linux

package indexbench

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }

func loadAvg() float64 { return 0 }

func threadClock() (time.Duration, bool) { return 0, false }
