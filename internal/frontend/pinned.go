package frontend

import (
	"github.com/kvrouter/kvrouter/internal/router"
)

// pinnedBusyMessage is the client's message for a request pinned to a
// worker over a busy threshold: the worker by its operator name and the
// threshold, so the client can tell it from the whole fleet being busy.
func (f *Frontend) pinnedBusyMessage(pe *router.PinnedBusyError) string {
	msg := "pinned worker " + f.workerName(pe.Worker) + " is overloaded"
	if pe.Reason != "" {
		msg += " (" + string(pe.Reason) + ")"
	}
	return msg + "; retry later, or without the pin"
}
