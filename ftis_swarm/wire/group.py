"""The rollout group as it travels: one prompt, G completions from one policy version.

Token ids are uint32 and log-probs float32 numpy arrays (no torch here: the wire layer is
imported by peers that may not train). A group is immutable once built; its id is the
hash of its canonical encoding (`ftis_swarm.wire.codec`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

WIRE_VERSION = 1


@dataclass(frozen=True, eq=False)
class Group:
    """A vertical group (docs/method.md, Wire). Field meanings: proto/group_v1.md."""

    run_id: str
    sender: str
    model_id: str
    policy_version: int
    created_at: float
    tokenizer_fp: str
    task_id: str
    item_id: str
    prompt_ids: np.ndarray
    temperature: float
    completion_ids: tuple[np.ndarray, ...]
    logp_gen: tuple[np.ndarray, ...]
    version: int = WIRE_VERSION
    _id: list = field(default_factory=list, init=False, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        *,
        run_id: str,
        sender: str,
        model_id: str,
        policy_version: int,
        created_at: float,
        tokenizer_fp: str,
        task_id: str,
        item_id: str,
        prompt_ids: Sequence[int] | np.ndarray,
        temperature: float,
        completion_ids: Sequence[Sequence[int] | np.ndarray],
        logp_gen: Sequence[Sequence[float] | np.ndarray],
    ) -> "Group":
        """Builds a group from lists or arrays, converting to the wire dtypes."""
        return cls(
            run_id=run_id,
            sender=sender,
            model_id=model_id,
            policy_version=int(policy_version),
            created_at=float(created_at),
            tokenizer_fp=tokenizer_fp,
            task_id=task_id,
            item_id=item_id,
            prompt_ids=np.asarray(prompt_ids, dtype=np.uint32),
            temperature=float(temperature),
            completion_ids=tuple(np.asarray(c, dtype=np.uint32) for c in completion_ids),
            logp_gen=tuple(np.asarray(lp, dtype=np.float32) for lp in logp_gen),
        )

    @property
    def G(self) -> int:
        return len(self.completion_ids)

    @property
    def completion_lengths(self) -> list[int]:
        return [int(c.shape[0]) for c in self.completion_ids]

    @property
    def num_completion_tokens(self) -> int:
        return sum(self.completion_lengths)

    @property
    def group_id(self) -> str:
        """Hex sha256 of the canonical encoding (first 32 hex digits); cached after the first call."""
        if not self._id:
            from ftis_swarm.wire.codec import content_id, encode_group

            self._id.append(content_id(encode_group(self)))
        return self._id[0]

    def same_content(self, other: "Group") -> bool:
        """True when every field and every array is equal, bit for bit."""
        from ftis_swarm.wire.codec import encode_group

        return encode_group(self) == encode_group(other)
