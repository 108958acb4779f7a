"""`PrefixAffinity`: the longest remembered context a prompt extends names its server."""

from __future__ import annotations

from trialground.policy.backends.remote.routing import PrefixAffinity, prefix_hashes


def test_the_longest_remembered_prefix_wins_and_dead_servers_are_forgotten() -> None:
    aff = PrefixAffinity(capacity=3)
    aff.remember([1, 2, 3], 0)
    aff.remember([1, 2, 3, 4, 5], 1)
    assert aff.lookup([1, 2, 3, 9]) == 0
    assert aff.lookup([1, 2, 3, 4, 5, 6]) == 1  # longer match
    assert aff.lookup([1, 2]) is None and aff.lookup([7, 1, 2, 3]) is None
    aff.forget_server(1)
    assert aff.lookup([1, 2, 3, 4, 5, 6]) == 0 and len(aff) == 1
    for n in range(4):
        aff.remember([9, n], 2)
    assert len(aff) == 3 and aff.lookup([1, 2, 3, 4]) is None  # the oldest went first
    assert prefix_hashes([5, 6])[1] == prefix_hashes([5])[1] != prefix_hashes([6])[1]
