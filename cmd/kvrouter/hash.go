package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/internal/config"
	"github.com/kvrouter/kvrouter/internal/kvhash"
)

const hashSummary = "Print the block hashes a router and a Dynamo-compatible engine compute for a list of token ids."

func init() {
	register("hash", command{summary: hashSummary, run: runHash})
}

var hashUsage = helpText(hashSummary, "kvrouter hash [--block-size N] [--lora-name S] [--namespace S] [--json] [TOKEN ...]",
	`Token ids come from the arguments, or from stdin when there are none; they are separated by white
space or commas. Only full blocks are hashed. The table has one row per block: its index, the
local hash of its tokens and the sequence hash of the prefix it ends.`)

func runHash(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	h, rest, code, ok := load[config.Hash]("hash", hashUsage, args, config.DefaultHash, stdout, stderr)
	if !ok {
		return code
	}
	var text string
	if len(rest) > 0 {
		text = strings.Join(rest, " ")
	} else {
		b, err := io.ReadAll(io.LimitReader(stdin, 1<<30))
		if err != nil {
			fmt.Fprintf(stderr, "kvrouter hash: reading stdin: %v\n", err)
			return 1
		}
		text = string(b)
	}
	tokens, err := parseTokens(text)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter hash: %v\n", err)
		return 2
	}
	local, seq, err := kvhash.Hashes(tokens, kvhash.Options{BlockSize: h.BlockSize, LoRAName: h.LoRAName, Namespace: h.Namespace}, nil, nil)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter hash: %v\n", err)
		return 2
	}
	if h.JSON {
		out := struct {
			BlockSize int      `json:"block_size"`
			Local     []uint64 `json:"local"`
			Sequence  []uint64 `json:"sequence"`
		}{h.BlockSize, local, seq}
		if out.Local == nil {
			out.Local, out.Sequence = []uint64{}, []uint64{}
		}
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			return 1
		}
		return 0
	}
	fmt.Fprintln(stdout, "block\tlocal_hash\tsequence_hash")
	for i := range local {
		fmt.Fprintf(stdout, "%d\t%d\t%d\n", i, local[i], seq[i])
	}
	return 0
}

// parseTokens reads token ids separated by white space and/or commas.
func parseTokens(s string) ([]uint32, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool {
		return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
	})
	out := make([]uint32, 0, len(fields))
	for i, f := range fields {
		v, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			var ne *strconv.NumError
			if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
				return nil, fmt.Errorf("token %d (%q) is larger than the u32 maximum 4294967295", i+1, f)
			}
			return nil, fmt.Errorf("token %d (%q) is not a non-negative integer", i+1, f)
		}
		out = append(out, uint32(v))
	}
	return out, nil
}
