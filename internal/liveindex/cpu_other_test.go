//go:build !linux

package liveindex

import "time"

func threadCPU() (time.Duration, bool) { return 0, false }

func threadClock() (time.Duration, bool) { return 0, false }
