"""Integrations: trialground's sandboxes, tasks and grader as the environment layer of other trainers and
tools. Each module wraps one outside project and imports it lazily, so installing trialground never pulls
another trainer in."""
