"""The rollout interface every backend implements, and the checks they share.

A backend turns already-rendered prompts (token ids, from `ftis_swarm.tasks`) into wire
`Group`s: G completions per prompt, all from the policy version the backend serves when
the call starts, with the fp32 log-probs of the sampled tokens under softmax(z / T), the
distribution actually sampled from (docs/method.md, Vocabulary; top-p and top-k stay off). Bad input is
refused before any compute, with one sentence (`RolloutInputError`), so a caller can skip
the item and count the reason instead of losing the worker.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ftis_swarm.config import SamplingConfig
from ftis_swarm.wire import Group
from ftis_swarm.wire.codec import FAMILY_CHARS
from ftis_swarm.wire.fingerprint import token_bytes
from ftis_swarm.wire.group import MAX_TOKEN_BYTES


class RolloutInputError(ValueError):
    """A prompt the backend cannot serve (too long for the context, empty, ids out of range)."""


@dataclass(frozen=True)
class PromptRequest:
    """One prompt to sample a group for: ids as rendered by the task (chat template included)."""

    task_id: str
    item_id: str
    prompt_ids: list[int]


@dataclass(frozen=True)
class GroupHeader:
    """The Group fields a backend cannot know itself (the tokenizer fingerprint it computes)."""

    run_id: str
    sender: str
    model_id: str
    task_digest: str = ""
    """The node's task digest (`Task.digest`), stamped on every group as `tdg`."""
    alignment: bool = False
    """Whether groups carry alignment data (tokenizer family, texts, token byte lengths) for learners with
    another tokenizer (docs/method.md, "Peers with another tokenizer"; the node's `publish_alignment`)."""


@dataclass(frozen=True)
class Completion:
    """One sampled completion: token ids and their fp32 log-probs, equal lengths, at least one."""

    token_ids: list[int]
    logprobs: list[float]


def call_seed(seed: int | None, call_index: int) -> int | None:
    """The seed of a backend's `call_index`-th generate call: reproducible runs, no repeats across calls."""
    if seed is None:
        return None
    return (int(seed) * 1_000_003 + call_index) % (1 << 62)


def check_prompts(prompts: Sequence[PromptRequest], *, context_len: int, vocab_size: int) -> None:
    """Raises RolloutInputError, naming the item, for a prompt no backend could complete."""
    for p in prompts:
        n = len(p.prompt_ids)
        if n == 0:
            raise RolloutInputError(f"prompt of item {p.task_id}/{p.item_id} is empty")
        if n >= context_len:
            raise RolloutInputError(
                f"prompt of item {p.task_id}/{p.item_id} has {n} tokens, but the model's context is "
                f"{context_len} tokens and at least one must be left for the completion"
            )
        bad = [t for t in p.prompt_ids if not 0 <= int(t) < vocab_size]
        if bad:
            raise RolloutInputError(
                f"prompt of item {p.task_id}/{p.item_id} has token id {bad[0]} outside the model's "
                f"vocabulary of {vocab_size}"
            )


def completion_budget(prompt_len: int, max_new_tokens: int, context_len: int) -> int:
    """Most tokens a completion may have: max_new_tokens, cut where the context ends (>= 1)."""
    return max(1, min(max_new_tokens, context_len - prompt_len))


class RolloutBackend(abc.ABC):
    """Samples vertical groups from one policy, which `load_weights`/`set_adapter` replace; decodes greedily.

    `policy_version` starts at 0 and advances by one on each weight or adapter change; every
    group of one `generate` call carries the version that produced it.
    """

    def __init__(self, *, header: GroupHeader, tokenizer_fp: str) -> None:
        self.header = header
        self.tokenizer_fp = tokenizer_fp
        self.aligner: Optional[Aligner] = None
        """Fills each group's alignment data; a backend that knows its tokenizer sets it when the header asks."""
        self._version = 0
        self._calls = 0

    @property
    def policy_version(self) -> int:
        return self._version

    def bump_policy_version(self) -> int:
        """Records that the served weights changed (in place, by whoever shares them); returns the new version."""
        self._version += 1
        return self._version

    @abc.abstractmethod
    def generate(self, prompts: Sequence[PromptRequest], G: int, sampling: SamplingConfig) -> list[Group]:
        """One Group per prompt, in order, each with G completions from `policy_version`."""

    @abc.abstractmethod
    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
        """The greedy completion (argmax at every step, EOS kept) of each token-id prompt, from the served policy.

        The evaluation's one decoder: no sampling settings and no generation_config
        penalties; each completion is cut at `completion_budget` like a sampled one.
        """

    @property
    @abc.abstractmethod
    def context_len(self) -> int:
        """Most tokens (prompt plus completion) the served model takes."""

    @abc.abstractmethod
    def load_weights(self, path: str) -> None:
        """Serve the full model whose safetensors lie in the directory `path`; advances the version."""

    @abc.abstractmethod
    def set_adapter(self, path: str) -> None:
        """Serve the base model with the LoRA adapter saved (peft format) in `path`; advances the version."""

    def close(self) -> None:
        """Frees what the backend holds (engine, caches); the default holds nothing to free."""

    @property
    def generate_calls(self) -> int:
        """`generate` calls so far: with `call_seed`, what the next call's seed depends on."""
        return self._calls

    def restore_generate_calls(self, calls: int) -> None:
        """After a resume: the next call draws the seed it would have drawn without the restart."""
        if calls < 0:
            raise ValueError(f"calls must be >= 0, got {calls}")
        self._calls = int(calls)

    def _next_seed(self, sampling: SamplingConfig) -> int | None:
        seed = call_seed(sampling.seed, self._calls)
        self._calls += 1
        return seed

    def _groups(
        self, prompts: Sequence[PromptRequest], completions: Sequence[Sequence[Completion]], sampling: SamplingConfig,
        version: int,
    ) -> list[Group]:
        now = time.time()
        return [
            Group.build(
                run_id=self.header.run_id,
                sender=self.header.sender,
                model_id=self.header.model_id,
                policy_version=version,
                created_at=now,
                tokenizer_fp=self.tokenizer_fp,
                task_id=p.task_id,
                item_id=p.item_id,
                prompt_ids=p.prompt_ids,
                temperature=sampling.temperature,
                completion_ids=[c.token_ids for c in group],
                logp_gen=[c.logprobs for c in group],
                task_digest=self.header.task_digest,
                **(self.aligner.fields(group) if self.aligner is not None else {}),
            )
            for p, group in zip(prompts, completions)
        ]


@dataclass(frozen=True)
class Aligner:
    """What a group of this backend's tokenizer carries for learners with another tokenizer: each completion's
    UTF-8 text and each token's byte length in it, a stop (`stop_ids`, as the last token) 0 bytes.

    A group it cannot describe within the wire's rules (a tokenizer that is not byte-level BPE, a token over
    255 bytes, a completion cut inside a character so its text is not UTF-8) goes without alignment data:
    learners of this tokenizer read it as ever; others refuse it (`tokenizer`), never charge it.
    """

    tokenizer: Any
    family: str
    stop_ids: frozenset[int]

    def fields(self, group: Sequence[Completion]) -> dict[str, Any]:
        """`Group.build`'s `tokenizer_family`, `texts`, `token_bytes` for one group's completions; {} when none fit."""
        texts, sizes = [], []
        for c in group:
            last = {int(c.token_ids[-1])} & self.stop_ids if c.token_ids else set()
            try:
                pieces = token_bytes(self.tokenizer, c.token_ids, stop_ids=last)
            except ValueError:
                return {}
            text = b"".join(pieces)
            if any(p == b"" for p in pieces[:-1]) or any(len(p) > MAX_TOKEN_BYTES for p in pieces):
                return {}
            try:
                text.decode("utf-8", errors="strict")
            except UnicodeDecodeError:
                return {}
            texts.append(text)
            sizes.append([len(p) for p in pieces])
        return {"tokenizer_family": self.family[:FAMILY_CHARS], "texts": texts, "token_bytes": sizes}


def aligner_for(header: GroupHeader, tokenizer: Any, model_config: Any, eos_ids: Sequence[int]) -> Optional[Aligner]:
    """The backend's `aligner` when `header.alignment` asks for one: the family is the model's type."""
    if not header.alignment:
        return None
    family = str(getattr(model_config, "model_type", "") or type(tokenizer).__name__)
    return Aligner(tokenizer=tokenizer, family=family, stop_ids=frozenset(int(i) for i in eos_ids))


def eos_token_ids(tokenizer: object, *configs: object) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS plus each config's `eos_token_id` (int or list).

    Instruct checkpoints often list two (Qwen2.5: `<|im_end|>` and `<|endoftext|>`); both
    backends stop on the same set so that they sample the same distribution over lengths.
    """
    ids: set[int] = set()
    for source in (tokenizer, *configs):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    if not ids:
        raise ValueError("the model names no EOS token (tokenizer, config and generation config all lack one)")
    return sorted(ids)


def greedy_texts(backend: RolloutBackend, tokenizer: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                 batch_size: int, on_batch: Optional[Callable[[int, int], None]] = None) -> list[str]:
    """The backend's greedy completion of each prompt, decoded without special tokens, `batch_size` prompts a call.

    `on_batch(done, total)` after each call (a progress bar). `ftis-node eval` and the
    experiment's held-out accuracy both decode here.
    """
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
        ids = backend.greedy(prompts[start : start + batch_size], max_new_tokens)
        texts += tokenizer.batch_decode(ids, skip_special_tokens=True)
        if on_batch:
            on_batch(len(texts), len(prompts))
    return texts
