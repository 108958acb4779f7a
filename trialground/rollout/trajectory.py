"""Token-exact trajectories: what the policy produced, what the environment answered, how it ended and,
once scored (`trialground.rollout.scoring`), what it earned."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trialground.envs.base import EpisodeEnd
from trialground.errors import ErrorInfo
from trialground.verify.reward.model import Reward

CONTEXT_BUDGET = "context_budget"  # finish_reason of an episode the context budget ended before grading


class Turn(BaseModel):
    """One exchange. `role="policy"` tokens are trained on; `role="env"` tokens are masked out."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["prompt", "policy", "env"]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] = ()
    text: str = ""
    seconds: float = 0.0
    version: int | None = Field(None, description="Policy turns: the policy version that sampled them")


class BranchInfo(BaseModel):
    """Where a branched trajectory came from (`loop.branch`): one trunk episode ran the shared prefix
    once, then its sandbox was forked and this trajectory continued in its own fork.

    The prefix is part of the trajectory's prompt (its turns have role "prompt"), so `completion()` and
    the loss see only the branch's own tokens. A trunk that ended before its branch point is recorded
    with `fallback=True`: that trajectory is an ordinary whole episode (nothing masked) and its group
    is completed with independent episodes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trunk_id: str = Field(description="Shared by every trajectory of one trunk")
    point: Literal["first_obs", "first_failure"] = Field(description="The branch rule that applied")
    fallback: bool = Field(False, description="The trunk ended before the branch point")
    prefix_turns: int = Field(0, ge=0, description="Policy turns in the shared prefix")
    prefix_tokens: int = Field(0, ge=0, description="Tokens after the task prompt in the prefix (masked)")
    prefix_policy_tokens: int = Field(0, ge=0, description="Policy-sampled tokens in the prefix")
    trunk_sandbox_s: float = Field(
        0.0, ge=0, description="Sandbox seconds of the trunk (acquire, reset, tools), shared by siblings"
    )
    fork_s: float = Field(0.0, ge=0, description="Seconds this trajectory's fork took")


class Trajectory(BaseModel):
    """One rollout of one task, stamped with the policy version that produced it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    group_id: str = Field(description="Trajectories of the same task in one step share a group")
    sample_index: int
    policy_version: int
    turns: tuple[Turn, ...] = ()
    end: EpisodeEnd | None = Field(None, description="How the environment ended the episode")
    reward: Reward | None = Field(None, description="Set by the rubric once the episode is over")
    error: ErrorInfo | None = Field(None, description="Infrastructure failure: excluded from training")
    truncated: bool = Field(False, description="The context budget cut the episode")
    finish_reason: str = ""
    timings: dict[str, float] = Field(default_factory=dict, description="Seconds per phase")
    retries: int = Field(
        0, ge=0, description="Fresh starts of the episode after the infrastructure lost its environment"
    )
    workspace_digest: str | None = Field(
        None, description="Hash of the workspace the episode started from (tool environments)"
    )
    branch: BranchInfo | None = Field(None, description="Set for trajectories of a branched group")

    @property
    def ok(self) -> bool:
        return self.error is None and self.reward is not None

    @property
    def visible_checks_changed(self) -> bool | None:
        """Whether a visible check file was edited, replaced or deleted during the episode (None: no
        hashes, e.g. no visible checks, not a tool episode, or a sandbox that broke)."""
        hashes = self.end.visible_checks if self.end is not None else None
        return None if hashes is None else bool(hashes.changed)

    @property
    def prompt_ids(self) -> list[int]:
        """The first segment's prompt (for a one-segment trajectory: the prompt)."""
        return self.segments()[0].prompt if self.turns else []

    def completion(self) -> tuple[list[int], list[int], list[float]]:
        """(token ids after the prompt, loss mask 1=policy token, sampling logprobs 0.0 for env tokens),
        every segment's completion concatenated: what was generated and observed, for lengths and text.
        Training uses `segments()`."""
        ids: list[int] = []
        mask: list[int] = []
        logps: list[float] = []
        for seg in self.segments():
            ids += seg.ids
            mask += seg.mask
            logps += seg.logprobs
        return ids, mask, logps

    def segments(self) -> list[Segment]:
        """The trajectory as trainable sequences. A `prompt` turn after a policy or env turn starts a new
        segment: the program behind a gateway episode rewrote its history (`trialground.gateway.stitch`),
        so the later calls were sampled from that prompt, not from the concatenation."""
        out: list[Segment] = []
        for turn in self.turns:
            if turn.role == "prompt":
                if not out or out[-1].ids:
                    out.append(Segment([], [], [], []))
                out[-1].prompt.extend(turn.token_ids)
                continue
            if not out:
                out.append(Segment([], [], [], []))
            is_policy = turn.role == "policy"
            out[-1].ids.extend(turn.token_ids)
            out[-1].mask.extend([1 if is_policy else 0] * len(turn.token_ids))
            out[-1].logprobs.extend(turn.logprobs if is_policy else [0.0] * len(turn.token_ids))
        return out or [Segment([], [], [], [])]


@dataclass(frozen=True)
class Segment:
    """One trainable sequence of a trajectory: its prompt, then the ids after it with the loss mask (1 =
    sampled by the policy) and the sampling logprobs (0.0 for masked ids)."""

    prompt: list[int]
    ids: list[int]
    mask: list[int]
    logprobs: list[float]
