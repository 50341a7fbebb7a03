package deploycheck

import (
	"os"
	"testing"
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
	os.Exit(code)
}
