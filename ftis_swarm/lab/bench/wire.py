"""`ftis-node bench wire`: what a group costs on the wire, and how fast it is encoded and decoded.

At the paper's scale (G = 12 completions of 512 tokens) it reports the encoded bytes per
completion token against the raw 8 (a uint32 id and a float32 log-prob), and encode/decode
throughput against copying the same number of bytes in the same process, the physical
limit of any codec that must produce a new buffer.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from ftis_swarm.wire import Group, decode_group, encode_group

SENDER = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"


def paper_group(*, G: int = 12, tokens: int = 512, prompt: int = 200, seed: int = 0) -> Group:
    rng = np.random.default_rng(seed)
    return Group.build(
        run_id="bench-run", sender=SENDER, model_id="Qwen/Qwen2.5-1.5B-Instruct", policy_version=42,
        created_at=time.time(), tokenizer_fp="0123456789abcdef0123456789abcdef", task_id="gsm8k",
        item_id="gsm8k/train/1234", prompt_ids=rng.integers(0, 151_643, prompt), temperature=1.0,
        completion_ids=[rng.integers(0, 151_643, tokens) for _ in range(G)],
        logp_gen=[-rng.exponential(1.0, tokens).astype(np.float32) for _ in range(G)],
    )


def _best_seconds(fn: Callable[[], object], *, repeat: int, number: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t0) / number)
    return best


@dataclass
class WireFigures:
    G: int
    tokens_per_completion: int
    prompt_tokens: int
    encoded_bytes: int
    bytes_per_completion_token: float
    raw_bytes_per_completion_token: float
    encode_gbps: float
    decode_gbps: float
    copy_gbps: float
    encode_vs_copy: float
    decode_vs_copy: float

    def as_dict(self) -> dict:
        return asdict(self)


def run_wire_bench(*, G: int = 12, tokens: int = 512, prompt: int = 200, repeat: int = 7,
                   number: int = 50) -> WireFigures:
    group = paper_group(G=G, tokens=tokens, prompt=prompt)
    data = encode_group(group)
    buf = np.frombuffer(data, dtype=np.uint8)
    enc = _best_seconds(lambda: encode_group(group), repeat=repeat, number=number)
    dec = _best_seconds(lambda: decode_group(data), repeat=repeat, number=number)
    cpy = _best_seconds(lambda: buf.copy(), repeat=repeat, number=number)
    n = len(data)
    return WireFigures(
        G=G, tokens_per_completion=tokens, prompt_tokens=prompt, encoded_bytes=n,
        bytes_per_completion_token=(n - 4 * prompt) / (G * tokens), raw_bytes_per_completion_token=8.0,
        encode_gbps=n / enc / 1e9, decode_gbps=n / dec / 1e9, copy_gbps=n / cpy / 1e9,
        encode_vs_copy=cpy / enc, decode_vs_copy=cpy / dec,
    )


def format_wire(f: WireFigures) -> str:
    rows = [
        ("group", f"G = {f.G} x {f.tokens_per_completion} tokens, prompt {f.prompt_tokens} tokens"),
        ("encoded size", f"{f.encoded_bytes} bytes"),
        ("bytes per completion token", f"{f.bytes_per_completion_token:.4f}  (raw: {f.raw_bytes_per_completion_token:.0f}; "
                                       f"{f.bytes_per_completion_token / 8:.4f} x raw)"),
        ("encode", f"{f.encode_gbps:.2f} GB/s  ({f.encode_vs_copy:.2f} x a memory copy)"),
        ("decode + validate", f"{f.decode_gbps:.2f} GB/s  ({f.decode_vs_copy:.2f} x a memory copy)"),
        ("memory copy (same bytes)", f"{f.copy_gbps:.2f} GB/s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
