"""ggufspec: speculative decoding over GGUF models on llama.cpp."""

__version__ = "0.1.0"
