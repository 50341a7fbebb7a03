// Package tokenizer encodes text into the token ids of a HuggingFace BPE
// model from the model's tokenizer.json, in pure Go, with ids identical to
// HuggingFace's tokenizers. Two families of BPE are covered: byte-level
// (Qwen2/2.5/3, Llama 3, DeepSeek V3, gpt-oss and other GPT-style models) and
// SentencePiece-style, on characters with a "▁" for each space and byte
// fallback (Gemma, Llama 2, Mistral).
//
// The router hashes blocks of token ids, so a single id that differs from
// what the engine computes shifts every block hash after it and the router
// silently loses its cache hits. Identity with the reference is therefore the
// one property that matters; speed comes second. The package reproduces the
// reference pipeline step by step:
//
//  1. added and special tokens (<|im_start|> …) are split out first, leftmost
//     longest match, honouring lstrip, rstrip, single_word and normalized;
//  2. each remaining stretch is normalised when the file configures a
//     normalizer: NFC, NFD, NFKC, NFKD, Replace (a literal or a regex) and
//     Prepend (Llama 2's "▁"), alone or in a Sequence;
//  3. the pre-tokenizer cuts it into words: Split with the model's pattern
//     (a regex, look-ahead included, compiled by github.com/dlclark/regexp2,
//     or a literal) and any of HuggingFace's behaviours (Isolated, Removed,
//     MergedWithPrevious, MergedWithNext, Contiguous; invert), Metaspace
//     (prepend_scheme always / first / never, split), Digits and ByteLevel
//     (optionally with its own GPT-2 regex and a prefix space), alone or in
//     a Sequence. For the split patterns of Qwen2/2.5/3, Llama 3, DeepSeek
//     V3 (three of them) and o200k (gpt-oss) hand-written matchers replace
//     regexp2; they are fuzzed against regexp2.
//     Without a pre-tokenizer (Llama 2) the whole stretch is one word;
//  4. each word is merged by BPE rank (lowest rank first, leftmost on ties;
//     with ignore_merges, a word found whole in the vocabulary is taken as
//     is), with a bounded per-tokenizer cache of word → ids. A byte-level
//     model starts from the word's bytes; a SentencePiece-style one (no
//     ByteLevel step) from its characters, a character missing from the
//     vocabulary becoming its <0xXX> byte tokens (byte_fallback) or
//     unk_token (fuse_unk joins a run of them);
//  5. a TemplateProcessing post-processor adds BOS/EOS ids when asked.
//
// Decode runs the file's decoder: ByteLevel, or a Sequence of Replace,
// ByteFallback, Fuse, Strip and Metaspace.
//
// Anything else — WordPiece, Unigram, WordLevel models, other normalizers
// (Lowercase, Strip, BertNormalizer, Precompiled …), pre-tokenizers
// (Whitespace, Punctuation …), post-processors or decoders, BPE dropout,
// continuing_subword_prefix — is refused at load time with ErrUnsupported,
// naming the feature, rather than tokenized approximately.
//
// Golden ids for the embedded Qwen3 tokenizer come from the pinned reference
// implementation (tools/tokgold); see testdata/qwen3_golden.jsonl. Llama 3.1,
// DeepSeek V3, Gemma 3, Llama 2 and gpt-oss have goldens of their own
// (testdata/<family>_golden.jsonl, ids and decodes, from the same reference
// and HuggingFace's Rust tokenizers, which agree), over tokenizer files kept
// in internal/modelfiles/testdata.
//
// Input that is not valid UTF-8 is first repaired the way HuggingFace's own
// decoders do (String::from_utf8_lossy: each maximal invalid subsequence
// becomes U+FFFD), because the reference only accepts valid strings.
//
// Two caches make repeated text cheap without changing any id: a word cache
// (pre-tokenized piece → ids, bounded by count) and a segment cache (a whole
// stretch of at least 256 bytes between added tokens → ids, LRU under a byte
// budget). Stretches between added tokens are tokenized independently of
// each other by the reference pipeline itself, so a chat message re-sent in
// every turn of a conversation is looked up instead of tokenized again.
//
// The ~150,000-token tables (vocabulary lookup, id → token, id → bytes) are
// held in flat pointer-free arrays rather than Go strings and maps: in the
// router's process the garbage collector would otherwise re-mark half a
// million small objects every cycle (~11 ms each), which showed as the front
// door's latency tail. The word cache is lock-free for the same reason of
// keeping every request's path short.
//
// EncodeLimit serves callers that refuse texts over a token limit (the
// router's --max-prompt-tokens): it stops at the first token past the limit,
// and a word too long for what is left of it is judged by its least token
// count before BPE runs over it, so a huge prompt costs the work of the
// limit rather than of the prompt.
//
// A *Tokenizer is immutable after Load except for its caches, which are
// safe for concurrent use: one tokenizer serves all requests.
package tokenizer
