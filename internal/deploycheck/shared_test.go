package deploycheck

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

var sharedDir string

// tempDirShared is a directory for the whole test binary (the built
// kvrouter), removed by TestMain.
func tempDirShared() (string, error) {
	if sharedDir == "" {
		d, err := os.MkdirTemp("", "deploycheck")
		if err != nil {
			return "", err
		}
		sharedDir = d
	}
	return sharedDir, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
	if code == 0 {
		// The tests run child processes and copy their output: none of
		// that may outlive them.
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
