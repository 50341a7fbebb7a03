package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

func runCmd(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHashCommandJSON(t *testing.T) {
	// The worked example of the Dynamo brief, block size 4; the trailing 8 is
	// a partial block and must not be hashed.
	code, out, errs := runCmd(t, "", "hash", "--block-size", "4", "--json", "0,1,2,3", "4", "5,6,7", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got struct {
		BlockSize int      `json:"block_size"`
		Local     []uint64 `json:"local"`
		Sequence  []uint64 `json:"sequence"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if got.BlockSize != 4 || len(got.Local) != 2 || got.Local[0] != 9143094415614847814 ||
		got.Local[1] != 12124091508212882195 || got.Sequence[1] != 9510318385840434533 {
		t.Fatalf("got %+v", got)
	}
}

func TestHashCommandStdinText(t *testing.T) {
	code, out, _ := runCmd(t, "0 1 2 3\n4 5 6 7\n", "hash", "--block-size", "4", "--lora-name", "adapter-a")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	want := "block\tlocal_hash\tsequence_hash\n0\t6665157333201000639\t6665157333201000639\n1\t11721812545976571723\t13351519314849170528\n"
	if out != want {
		t.Fatalf("got %q want %q", out, want)
	}
}

func TestHashCommandBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"hash", "--block-size", "4", "1", "x"}, "not a non-negative integer"},
		{[]string{"hash", "--block-size", "4", "4294967296"}, "larger than the u32 maximum"},
		{[]string{"hash", "--block-size", "0", "1"}, "--block-size must be a positive"},
		{[]string{"hash", "--block-size", "4", "--", "-1"}, "not a non-negative integer"},
	} {
		code, _, errs := runCmd(t, "", tc.args...)
		if code != 2 || !strings.Contains(errs, tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.msg)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	code, _, errs := runCmd(t, "", "frobnicate")
	if code != 2 || !strings.Contains(errs, "unknown command") {
		t.Fatalf("exit %d stderr %q", code, errs)
	}
}
