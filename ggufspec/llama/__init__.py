"""llama.cpp through llama-cpp-python's C API: the one package of ggufspec that imports `llama_cpp`.

By concept: `kernels` (which llama.cpp libraries load; no llama_cpp import), `lib` (the import
itself, process set-up, llama.cpp's log, Ctrl-C during C calls), `model` (weights, vocabulary,
tokenizer), `context` (KV cache, batch decode, logits),
`quantize` (llama.cpp's quantizer) and `measure` (what a model and context take, as llama.cpp
reports it). Importing this package imports nothing heavy; `lib` loads llama.cpp. Incremental
detokenizing needs no llama.cpp: it is `ggufspec.loop.text.Detokenizer` over `Model.token_bytes`.
"""
