"""What a verifier kind may build its resources from, and the grader's store of the resources kinds own.

A kind that needs something long-lived (a pool of grading sandboxes, a math worker process, a repository
cache) names a factory, `VerifierKind.resource` (a function or its dotted path), taking a
`GradingContext`. The grader calls it the first time a task of that kind is graded and hands what it made
to the kind's function as its first argument; kinds naming the same factory share one resource (the
gameable `failed_tests` batches with `code_tests`). A kind without a factory receives the context itself.
A resource with a `close()` (plain or async) is closed with the grader. The grader builds no kind's
resource itself, so a plugin kind brings its own without any edit here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.verifiers import VerifierKind
from trialground.verify.config import GradingConfig, RewardConfig
from trialground.verify.judges.judge import Judge
from trialground.verify.kinds.code_tests import Opener


@dataclass(frozen=True)
class GradingContext:
    """The run's grading settings, as every kind's resource factory and resource-less kind sees them:
    the grading sandbox's config, the reward section, where grading sandboxes open (`opener`: None is
    locally) and the run's judge (None: none configured; the grader owns and closes it)."""

    sandbox_config: SandboxConfig
    reward_config: RewardConfig
    opener: Opener | None = None
    judge: Judge | None = None

    @property
    def grading(self) -> GradingConfig:
        return self.reward_config.grading


class KindResources:
    """The resources of one grader's kinds, made on first use, one per factory."""

    def __init__(self, context: GradingContext) -> None:
        self.context = context
        self._made: dict[Callable[[GradingContext], Any], Any] = {}

    def for_kind(self, kind: VerifierKind) -> Any:
        """What `kind`'s function receives first: its factory's resource, or the context."""
        factory = kind.resource_factory()
        if factory is None:
            return self.context
        if factory not in self._made:
            self._made[factory] = factory(self.context)
        return self._made[factory]

    async def close(self) -> None:
        made, self._made = list(self._made.values()), {}
        for resource in made:
            close = getattr(resource, "close", None)
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    await result
