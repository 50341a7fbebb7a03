// Package modelfiles turns a Hugging Face model folder into what the router
// needs to count a model's tokens: its tokenizer and its chat template. The
// router hashes blocks of token ids, so the tokenizer and the prompt a chat
// request becomes must be exactly the engine's; both come from the files the
// engine itself loads.
//
// The API, for callers that keep one pool per model:
//
//	m, err := modelfiles.LoadDir("/models/Llama-3.1-8B-Instruct")
//	m.Tokenizer  // *tokenizer.Tokenizer: Encode, EncodeLimit, Decode
//	m.Template   // *chattemplate.Template, nil when the folder has none
//	m.BOS, m.EOS // special tokens as tokenizer_config.json names them
//
//	d, err := modelfiles.Default() // the embedded Qwen3, shared
//
// LoadDir reads tokenizer.json (required) and tokenizer_config.json
// (optional): the chat template (chat_template, or a chat_template.jinja
// file beside it, as newer folders have), bos_token, eos_token and the
// add_bos_token / add_eos_token flags. Errors wrap tokenizer.ErrUnsupported
// for a tokenizer this module cannot reproduce exactly (the message names
// the feature), tokenizer.ErrInvalid or chattemplate's sentinels, and
// fs.ErrNotExist when tokenizer.json is missing. A Model is immutable and
// safe for concurrent use; load each folder once.
//
// # add_bos_token
//
// transformers' LlamaTokenizerFast and GemmaTokenizerFast (tokenizer_class
// LlamaTokenizer, LlamaTokenizerFast, CodeLlamaTokenizer(Fast),
// GemmaTokenizer(Fast)) rebuild the post-processor when they load: BOS
// before the text when add_bos_token (default true), EOS after it when
// add_eos_token (default false), whatever tokenizer.json says. vLLM loads
// tokenizers through transformers, so LoadDir does the same for those
// classes (DeepSeek V3's tokenizer.json adds no BOS, but its config asks
// for one). Other classes keep tokenizer.json's post-processor. When a
// Llama config sets add_prefix_space, transformers rebuilds the tokenizer from the
// SentencePiece model instead of reading tokenizer.json; LoadDir refuses it
// (ErrUnsupported) rather than guess.
//
// The embedded default (Qwen3, in qwen3/, with provenance and licence) keeps
// kvrouter runnable with nothing outside its binary. testdata/ holds
// compressed copies of other families' files (Llama 3.1, DeepSeek V3, Gemma
// 3, Llama 2, gpt-oss), each with its provenance and licence, for the tests of this
// package, the tokenizer and the chat templates; they are not embedded.
package modelfiles
