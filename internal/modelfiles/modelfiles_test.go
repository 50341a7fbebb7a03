package modelfiles

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/chattemplate"
	"github.com/kvrouter/kvrouter/internal/tokenizer"
)

// originals are the sha256 sums recorded in testdata/PROVENANCE.md.
var originals = map[string]string{
	"llama3.1/tokenizer.json":           "e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7",
	"llama3.1/tokenizer_config.json":    "da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb",
	"deepseek-v3/tokenizer.json":        "621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41",
	"deepseek-v3/tokenizer_config.json": "637bcd1a08cf7c772ce6a383196b22930921c79c3c73223c5afc0c7f41545546",
	"gemma3/tokenizer.json":             "4667f2089529e8e7657cfb6d1c19910ae71ff5f28aa7ab2ff2763330affad795",
	"gemma3/tokenizer_config.json":      "fa4bdfa99d3936e966002d9622c8ef2dba07b15e48b117cb20fe5f47a02d7601",
	"llama2/tokenizer.json":             "fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc",
	"llama2/tokenizer_config.json":      "747ec99bae3fd9d7bf9c3b9172e5ca0d82ca0d23d64a58ef1752b612f196817b",
	"gpt-oss/tokenizer.json":            "0614fe83cadab421296e664e1f48f4261fa8fef6e03e63bb75c20f38e37d07d3",
	"gpt-oss/tokenizer_config.json":     "9279e942392b742d633c7adbb89ebe002c98399db8926a7af5125c726f404070",
}

// testFile returns testdata/<rel>, decompressing rel.gz when only that exists.
func testFile(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", rel))
	if err == nil {
		return b
	}
	gz, err := os.ReadFile(filepath.Join("testdata", rel+".gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	if b, err = io.ReadAll(zr); err != nil {
		t.Fatal(err)
	}
	return b
}

// modelDir writes a family's files, decompressed, into a fresh folder laid
// out as a Hugging Face model folder.
func modelDir(t *testing.T, family string, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), testFile(t, family+"/"+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestTestdataMatchesProvenance(t *testing.T) {
	for rel, want := range originals {
		sum := sha256.Sum256(testFile(t, rel))
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s: sha256 %s, PROVENANCE.md says %s", rel, got, want)
		}
	}
}

func TestLoadDirLlama31(t *testing.T) {
	m, err := LoadDir(modelDir(t, "llama3.1", "tokenizer.json", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m.BOS != "<|begin_of_text|>" || m.EOS != "<|eot_id|>" {
		t.Fatalf("BOS %q EOS %q", m.BOS, m.EOS)
	}
	// PreTrainedTokenizerFast keeps tokenizer.json's TemplateProcessing:
	// <|begin_of_text|> (128000), then "Hello" (9906) " world" (1917).
	if got := m.Tokenizer.Encode("Hello world", true); !slices.Equal(got, []uint32{128000, 9906, 1917}) {
		t.Fatalf("Encode = %v", got)
	}
	out, err := m.Template.Render([]byte(`[{"role":"user","content":" Hi "}]`), nil, chattemplate.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	if out != want {
		t.Fatalf("Render = %q", out)
	}
}

// DeepSeek V3's tokenizer.json adds no BOS, but its tokenizer_config.json
// names LlamaTokenizerFast with add_bos_token, which transformers turns
// into a BOS post-processor.
func TestLoadDirAddBOSToken(t *testing.T) {
	m, err := LoadDir(modelDir(t, "deepseek-v3", "tokenizer.json", "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := tokenizer.LoadJSON(testFile(t, "deepseek-v3/tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	text := "Hello world"
	body := plain.Encode(text, false)
	if got := plain.Encode(text, true); !slices.Equal(got, body) {
		t.Fatalf("tokenizer.json alone adds %v", got)
	}
	bos, ok := m.Tokenizer.TokenToID(m.BOS)
	if !ok || bos != 0 {
		t.Fatalf("BOS %q id %d %v", m.BOS, bos, ok)
	}
	if got := m.Tokenizer.Encode(text, true); !slices.Equal(got, append([]uint32{0}, body...)) {
		t.Fatalf("Encode(add special) = %v, want [0] + %v", got, body)
	}
	if got := m.Tokenizer.Encode(text, false); !slices.Equal(got, body) {
		t.Fatalf("Encode = %v, want %v", got, body)
	}
}

func TestLoadDirWithoutConfig(t *testing.T) {
	dir := modelDir(t, "llama2", "tokenizer.json")
	m, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Template != nil || m.BOS != "" {
		t.Fatalf("template %v BOS %q without tokenizer_config.json", m.Template, m.BOS)
	}
	// A chat_template.jinja alone is used.
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{% for m in messages %}[{{ m.content }}]{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err = LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	out, err := m.Template.Render([]byte(`[{"role":"user","content":"a"},{"role":"user","content":"b"}]`), nil, chattemplate.Options{})
	if err != nil || out != "[a][b]" {
		t.Fatalf("Render = %q, %v", out, err)
	}
}

func TestLoadDirErrors(t *testing.T) {
	if _, err := LoadDir(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("empty folder: %v", err)
	}
	// A WordPiece model is refused, and the error names it.
	dir := t.TempDir()
	wp := `{"model": {"type": "WordPiece", "vocab": {"a": 0, "[UNK]": 1}, "unk_token": "[UNK]"}}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(wp), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadDir(dir)
	if !errors.Is(err, tokenizer.ErrUnsupported) || !strings.Contains(err.Error(), "WordPiece") {
		t.Fatalf("WordPiece: %v", err)
	}
	// add_bos_token naming a token the vocabulary does not have.
	dir = modelDir(t, "llama2", "tokenizer.json")
	cfg := `{"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "bos_token": "<nope>"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "<nope>") {
		t.Fatalf("bad bos_token: %v", err)
	}
	// add_prefix_space makes transformers rebuild a Llama tokenizer from
	// its SentencePiece model: refused, naming it.
	cfg = `{"tokenizer_class": "LlamaTokenizerFast", "add_prefix_space": false, "bos_token": "<s>"}`
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir); !errors.Is(err, tokenizer.ErrUnsupported) || !strings.Contains(err.Error(), "add_prefix_space") {
		t.Fatalf("add_prefix_space: %v", err)
	}
}

func TestDefault(t *testing.T) {
	m, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if m.EOS != "<|im_end|>" || m.Template == nil {
		t.Fatalf("EOS %q template %v", m.EOS, m.Template)
	}
	tok, _ := tokenizer.Default()
	if m.Tokenizer != tok {
		t.Fatal("Default's tokenizer is not tokenizer.Default()")
	}
}

// Llama 2's tokenizer_config.json has no chat template: the folder's
// chat_template.jinja is used, with the config's special tokens.
func TestLoadDirJinjaBesideConfig(t *testing.T) {
	dir := modelDir(t, "llama2", "tokenizer.json", "tokenizer_config.json")
	m, err := LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Template != nil || m.BOS != "<s>" || m.EOS != "</s>" {
		t.Fatalf("template %v BOS %q EOS %q", m.Template, m.BOS, m.EOS)
	}
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte("{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err = LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	out, err := m.Template.Render([]byte(`[{"role":"user","content":"hi"}]`), nil, chattemplate.Options{})
	if err != nil || out != "<s>[INST] hi [/INST]" {
		t.Fatalf("Render = %q, %v", out, err)
	}
	// LlamaTokenizer with add_bos_token: <s> (1) first, once.
	ids := m.Tokenizer.Encode(out, false)
	if with := m.Tokenizer.Encode("hi", true); len(with) < 2 || with[0] != 1 || with[1] == 1 {
		t.Fatalf("Encode(hi, special) = %v", with)
	}
	if ids[0] != 1 {
		t.Fatalf("the rendered <s> is not token 1: %v", ids)
	}
}
