"""The verifiers 0.4 taskset plugin `trialground-verifiers` (verifiers imports a taskset id as a top-level
module exporting its `Taskset` subclass in `__all__`): `trialground.integrations.verifiers_v1`."""

from trialground.integrations.verifiers_v1 import TrialgroundTaskset

__all__ = ["TrialgroundTaskset"]
