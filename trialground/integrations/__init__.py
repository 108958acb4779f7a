"""Adapters that let other projects' trainers and clients use trialground's sandboxes, tasks and grader as
their environment layer. One module per integration, each speaking the other project's protocol exactly
(its own client code works unchanged) and importing it lazily, so installing trialground never pulls
another trainer in:

- `sandbox_fusion`: SandboxFusion's `/run_code` HTTP API, served by `trialground sandbox serve`;
- `openenv`: OpenEnv's environment-server protocol over `ToolEnv` episodes (`trialground env serve`);
- `trl`: TRL `GRPOTrainer` reward functions and tool environments;
- `verifiers`: a task set and its grader as a verifiers environment.
"""
