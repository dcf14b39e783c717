"""Policies: one numpy protocol (`reset(slots, episodes)`, `act(batch, slots)`) and adapters."""

from rollbench.policies.base import POLICIES, EpisodeStart, Policy, PolicyContext, make_policy

__all__ = ["POLICIES", "EpisodeStart", "Policy", "PolicyContext", "make_policy"]
