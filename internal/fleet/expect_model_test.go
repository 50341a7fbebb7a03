package fleet

import (
	"errors"
	"testing"
)

// With a default model, the router's block size binds that model's
// workers (and those that name none) only; another model's worker is
// left to its model's pool.
func TestExpectBlockSizePerModel(t *testing.T) {
	e := Expect{BlockSize: 16, Model: "m-a", Hash: DefaultHashContract()}
	for _, c := range []struct {
		model string
		bs    int
		bad   bool
	}{{"", 16, false}, {"", 32, true}, {"m-a", 32, true}, {"m-a", 16, false}, {"m-b", 32, false}, {"m-b", 16, false}} {
		err := e.Check(WorkerRecord{Model: c.model, BlockSize: c.bs})
		if got := errors.Is(err, ErrBlockSizeMismatch); got != c.bad {
			t.Errorf("model %q block size %d: %v, want refused=%v", c.model, c.bs, err, c.bad)
		}
	}
	e.Model = "" // no default model: every worker shares the block size
	if err := e.Check(WorkerRecord{Model: "m-b", BlockSize: 32}); !errors.Is(err, ErrBlockSizeMismatch) {
		t.Errorf("without a default model, m-b at 32: %v", err)
	}
}
