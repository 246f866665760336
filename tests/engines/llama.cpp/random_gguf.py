#!/usr/bin/env python3
"""Writes a GGUF v3 llama model of random weights, for running llama.cpp
under kvtier without downloading a model.

The shape is the caller's (layers, width, heads, KV heads for GQA, feed-
forward width, context length); the weights are f16 draws of a seeded
generator, so one seed and shape give the same file, byte for byte, and
llama.cpp's greedy decoding gives the same tokens from run to run. The
vocabulary is a small SentencePiece-style one: <unk>, <s>, </s>, the 256
byte tokens, and pieces made of letters, so any text tokenizes.

    random_gguf.py OUT.gguf [--layers 4] [--embd 256] [--heads 4]
                   [--kv-heads 4] [--ff 704] [--ctx 4096] [--seed 1]

Standard library only.
"""
import argparse
import random
import struct
import sys

# GGUF value types (gguf.md in the llama.cpp tree).
U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10
# Tensor types.
GGML_F32, GGML_F16 = 0, 1
ALIGNMENT = 32

# SentencePiece token types as llama.cpp reads them.
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6


def gguf_string(text):
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def gguf_value(kind, value):
    if kind == U32:
        return struct.pack("<I", value)
    if kind == I32:
        return struct.pack("<i", value)
    if kind == U64:
        return struct.pack("<Q", value)
    if kind == F32:
        return struct.pack("<f", value)
    if kind == BOOL:
        return struct.pack("<?", value)
    if kind == STRING:
        return gguf_string(value)
    raise ValueError("unsupported GGUF type %d" % kind)


def gguf_kv(key, kind, value, elem=None):
    out = gguf_string(key) + struct.pack("<I", kind)
    if kind == ARRAY:
        out += struct.pack("<IQ", elem, len(value))
        out += b"".join(gguf_value(elem, v) for v in value)
    else:
        out += gguf_value(kind, value)
    return out


def vocabulary():
    """<unk>, <s>, </s>, 256 byte tokens, then letter pieces, with scores."""
    tokens = [("<unk>", 0.0, TOKEN_UNKNOWN), ("<s>", 0.0, TOKEN_CONTROL),
              ("</s>", 0.0, TOKEN_CONTROL)]
    tokens += [("<0x%02X>" % b, 0.0, TOKEN_BYTE) for b in range(256)]
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["\u2581"] + ["\u2581" + c for c in letters] + list(letters)
    pieces += ["\u2581" + a + b for a in "aeiost" for b in letters]
    pieces += [a + b for a in "aeinorst" for b in "aeinorst"]
    seen = set()
    score = -1.0
    for p in pieces:
        if p in seen:
            continue
        seen.add(p)
        tokens.append((p, score, TOKEN_NORMAL))
        score -= 0.01
    return tokens


def f16_block(rng, count, scale):
    """`count` f16 values uniform in [-scale, scale]."""
    values = [rng.uniform(-scale, scale) for _ in range(count)]
    return struct.pack("<%de" % count, *values)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=None, help="default: --heads (no GQA)")
    ap.add_argument("--ff", type=int, default=704)
    ap.add_argument("--ctx", type=int, default=4096, help="the model's trained context")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    kv_heads = a.kv_heads or a.heads
    if a.layers < 1 or a.embd < 1 or a.ff < 1 or a.ctx < 1:
        ap.error("--layers, --embd, --ff and --ctx must be at least 1")
    if a.heads < 1 or a.embd % a.heads:
        ap.error("--heads must divide --embd")
    if kv_heads < 1 or a.heads % kv_heads:
        ap.error("--kv-heads must divide --heads")
    head_dim = a.embd // a.heads
    if head_dim % 2:
        ap.error("--embd / --heads must be even (rotary embeddings)")
    embd_kv = head_dim * kv_heads

    vocab = vocabulary()
    n_vocab = len(vocab)
    meta = [
        gguf_kv("general.architecture", STRING, "llama"),
        gguf_kv("general.name", STRING, "kvtier-random-%dl-%d" % (a.layers, a.embd)),
        gguf_kv("general.alignment", U32, ALIGNMENT),
        gguf_kv("llama.context_length", U32, a.ctx),
        gguf_kv("llama.embedding_length", U32, a.embd),
        gguf_kv("llama.block_count", U32, a.layers),
        gguf_kv("llama.feed_forward_length", U32, a.ff),
        gguf_kv("llama.attention.head_count", U32, a.heads),
        gguf_kv("llama.attention.head_count_kv", U32, kv_heads),
        gguf_kv("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
        gguf_kv("llama.rope.dimension_count", U32, head_dim),
        gguf_kv("llama.rope.freq_base", F32, 10000.0),
        gguf_kv("llama.vocab_size", U32, n_vocab),
        gguf_kv("tokenizer.ggml.model", STRING, "llama"),
        gguf_kv("tokenizer.ggml.tokens", ARRAY, [t for t, _, _ in vocab], STRING),
        gguf_kv("tokenizer.ggml.scores", ARRAY, [s for _, s, _ in vocab], F32),
        gguf_kv("tokenizer.ggml.token_type", ARRAY, [k for _, _, k in vocab], I32),
        gguf_kv("tokenizer.ggml.unknown_token_id", U32, 0),
        gguf_kv("tokenizer.ggml.bos_token_id", U32, 1),
        gguf_kv("tokenizer.ggml.eos_token_id", U32, 2),
        gguf_kv("tokenizer.ggml.add_bos_token", BOOL, True),
        gguf_kv("tokenizer.ggml.add_eos_token", BOOL, False),
    ]

    # (name, dims innermost first, type); norms are f32 ones.
    tensors = [("token_embd.weight", [a.embd, n_vocab], GGML_F16)]
    for i in range(a.layers):
        p = "blk.%d." % i
        tensors += [
            (p + "attn_norm.weight", [a.embd], GGML_F32),
            (p + "attn_q.weight", [a.embd, a.embd], GGML_F16),
            (p + "attn_k.weight", [a.embd, embd_kv], GGML_F16),
            (p + "attn_v.weight", [a.embd, embd_kv], GGML_F16),
            (p + "attn_output.weight", [a.embd, a.embd], GGML_F16),
            (p + "ffn_norm.weight", [a.embd], GGML_F32),
            (p + "ffn_gate.weight", [a.embd, a.ff], GGML_F16),
            (p + "ffn_up.weight", [a.embd, a.ff], GGML_F16),
            (p + "ffn_down.weight", [a.ff, a.embd], GGML_F16),
        ]
    tensors += [("output_norm.weight", [a.embd], GGML_F32),
                ("output.weight", [a.embd, n_vocab], GGML_F16)]

    rng = random.Random(a.seed)
    infos, blobs, offset = [], [], 0
    for name, dims, kind in tensors:
        count = 1
        for d in dims:
            count *= d
        if kind == GGML_F32:
            blob = struct.pack("<%df" % count, *([1.0] * count))
        else:
            # Uniform of variance 1/fan_in keeps activations bounded.
            blob = f16_block(rng, count, (3.0 / dims[0]) ** 0.5)
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<Q", d) for d in dims) +
                     struct.pack("<IQ", kind, offset))
        pad = -len(blob) % ALIGNMENT
        blobs.append(blob + b"\0" * pad)
        offset += len(blob) + pad

    header = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    head = header + b"".join(meta) + b"".join(infos)
    head += b"\0" * (-len(head) % ALIGNMENT)
    with open(a.out, "wb") as f:
        f.write(head)
        for b in blobs:
            f.write(b)
    print("%s: llama, %d layers, n_embd %d, %d heads (%d KV), ff %d, vocab %d, ctx %d, "
          "%.1f MB" % (a.out, a.layers, a.embd, a.heads, kv_heads, a.ff, n_vocab, a.ctx,
                       (len(head) + offset) / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
