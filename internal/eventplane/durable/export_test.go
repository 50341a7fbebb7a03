package durable

// SetStartHook makes Start call f after each of its steps: "deleted" (the
// old consumer), "created" (the new one), "restored" (the snapshot, or
// none found). Tests use it to run another router's snapshot and purge
// at each point of a restart.
func SetStartHook(c *Consumer, f func(step string)) {
	names := [...]string{stepDeleted: "deleted", stepCreated: "created", stepRestored: "restored"}
	c.testHook = func(s startStep) { f(names[s]) }
}
