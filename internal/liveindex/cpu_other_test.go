//go:build !linux

package liveindex

import "time"

func threadClock() (time.Duration, bool) { return 0, false }
