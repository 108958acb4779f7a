"""Adapters that let other projects' trainers and clients use trialground's sandboxes and environments.

One module per integration, each speaking the other project's protocol exactly, so that its own client
code works unchanged:

- `sandbox_fusion`: SandboxFusion's `/run_code` HTTP API, served by `trialground sandbox serve`;
- `openenv`: OpenEnv's environment-server protocol over `ToolEnv` episodes (`trialground env serve`).
"""
