"""A tiny llama model with random weights, as GGUF, for the real llama-server.

Two layers, 64 wide, four heads, with the vocabulary (and tokenizer settings) of one of
llama.cpp's vocabulary-only files (`ggml-vocab-llama-spm.gguf`: SentencePiece, 32000
tokens). All float32: about 17 MB, mostly the token embeddings and the output matrix. It
loads in well under a second, answers chat completions with nonsense, and with
`--embeddings --pooling mean` answers embeddings: what the fleet test needs from a model,
nothing it needs from a language model. Seeded: the same vocabulary and seed make the same
bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType


@dataclass(frozen=True)
class TinyLlama:
    layers: int = 2
    width: int = 64
    heads: int = 4
    feed_forward: int = 128
    context: int = 512
    seed: int = 14


Field = tuple[str, object, GGUFValueType, GGUFValueType | None]


def _vocabulary_fields(vocabulary: Path) -> list[Field]:
    """Every `tokenizer.*` key of a vocabulary file, with its GGUF types."""
    fields: list[Field] = []
    for key, field in GGUFReader(vocabulary).fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = field.types[0]
        sub = field.types[1] if kind == GGUFValueType.ARRAY else None
        fields.append((key, field.contents(), kind, sub))
    return fields


def write_tiny_llama(vocabulary: Path, path: Path, shape: TinyLlama = TinyLlama()) -> Path:
    """Writes the model to `path` (and returns it)."""
    fields = _vocabulary_fields(vocabulary)
    tokens = next(value for key, value, _, _ in fields if key == "tokenizer.ggml.tokens")
    assert isinstance(tokens, list)
    vocab = len(tokens)
    rng = np.random.default_rng(shape.seed)

    def weights(*dims: int) -> np.ndarray[tuple[int, ...], np.dtype[np.float32]]:
        # numpy's shape is GGUF's dimensions reversed: (rows, columns) = (ne[1], ne[0]).
        return (rng.standard_normal(dims) * 0.02).astype(np.float32)

    ones = np.ones(shape.width, dtype=np.float32)
    writer = GGUFWriter(path, "llama")
    writer.add_name("modelfleet-tiny-llama")
    writer.add_file_type(LlamaFileType.ALL_F32)
    writer.add_vocab_size(vocab)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.width)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(shape.width // shape.heads)
    for key, value, kind, sub in fields:
        writer.add_key_value(key, value, kind, sub)
    writer.add_tensor("token_embd.weight", weights(vocab, shape.width))
    for layer in range(shape.layers):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{name}.weight", weights(shape.width, shape.width))
        writer.add_tensor(f"{block}.ffn_norm.weight", ones)
        writer.add_tensor(f"{block}.ffn_gate.weight", weights(shape.feed_forward, shape.width))
        writer.add_tensor(f"{block}.ffn_up.weight", weights(shape.feed_forward, shape.width))
        writer.add_tensor(f"{block}.ffn_down.weight", weights(shape.width, shape.feed_forward))
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", weights(vocab, shape.width))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
