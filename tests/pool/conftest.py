from __future__ import annotations

import pytest
from poolkit import make_task

from trialground.tasks.model import Task


@pytest.fixture
def task() -> Task:
    return make_task(0)
