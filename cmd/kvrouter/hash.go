package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/internal/kvhash"
)

func init() {
	register("hash", command{summary: "print Dynamo-compatible block hashes of token ids", run: runHash})
}

func runHash(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hash", flag.ContinueOnError)
	fs.SetOutput(stderr)
	blockSize := fs.Int("block-size", 0, "tokens per KV block (required, > 0)")
	lora := fs.String("lora-name", "", "LoRA adapter name (salts the local hash seed)")
	ns := fs.String("namespace", "", "cache namespace (salts the local hash seed)")
	asJSON := fs.Bool("json", false, `print {"block_size":N,"local":[...],"sequence":[...]}`)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: kvrouter hash --block-size N [--lora-name S] [--namespace S] [--json] [TOKEN ...]")
		fmt.Fprintln(stderr, "Token ids come from the arguments, or from stdin when there are none;")
		fmt.Fprintln(stderr, "they are separated by white space or commas. Only full blocks are hashed.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *blockSize <= 0 {
		fmt.Fprintf(stderr, "kvrouter hash: --block-size must be a positive number of tokens (got %d)\n", *blockSize)
		return 2
	}
	var text string
	if fs.NArg() > 0 {
		text = strings.Join(fs.Args(), " ")
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
	local, seq, err := kvhash.Hashes(tokens, kvhash.Options{BlockSize: *blockSize, LoRAName: *lora, Namespace: *ns}, nil, nil)
	if err != nil {
		fmt.Fprintf(stderr, "kvrouter hash: %v\n", err)
		return 2
	}
	if *asJSON {
		out := struct {
			BlockSize int      `json:"block_size"`
			Local     []uint64 `json:"local"`
			Sequence  []uint64 `json:"sequence"`
		}{*blockSize, local, seq}
		if out.Local == nil {
			out.Local, out.Sequence = []uint64{}, []uint64{}
		}
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			return 1
		}
		return 0
	}
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
