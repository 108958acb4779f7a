"""The paid number: a `Reward` carries every named component and every flag; its `total` is a pure function
of them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, computed_field

from trialground.verify.verdict import Flag


class RewardComponent(BaseModel):
    """A named part of the reward: its raw value and the weight it is paid with (0 = logged only).

    A gated component is paid only when the outcome passed (shaping); an ungated one always (the overlong
    penalty, which must also reach failed episodes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    value: float
    weight: float
    gated: bool = True


class Reward(BaseModel):
    """outcome gate + weighted shaping. `total` is computed, never stored independently."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    outcome: float = Field(description="1.0 when the outcome check passed, else 0.0")
    components: tuple[RewardComponent, ...] = ()
    flags: tuple[Flag, ...] = ()
    gated: bool = Field(True, description="Shaping is paid only when the outcome passed")
    zeroed: bool = Field(False, description="A hack flag forced the reward to 0")
    penalty: float = Field(0.0, ge=0.0, description="Subtracted from the total (hack_action=penalty)")
    dropped: bool = Field(
        False,
        description="Excluded from the group baseline and the loss (hack_action=drop, or an infrastructure "
        "failure)",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> float:
        always = sum(c.weight * c.value for c in self.components if not c.gated) - self.penalty
        if self.zeroed or (self.gated and self.outcome <= 0.0):
            return 0.0 + always
        return self.outcome + sum(c.weight * c.value for c in self.components if c.gated) + always

    @property
    def solved(self) -> bool:
        """The one definition of a solved episode: the outcome gate passed (no hack flag, no error)."""
        return self.outcome > 0.0

    def component(self, name: str) -> RewardComponent | None:
        """The component called `name`, if present."""
        return next((c for c in self.components if c.name == name), None)
