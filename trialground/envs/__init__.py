"""Environments: single-turn completion and multi-turn tool use."""

from trialground.envs.base import Environment, Forkable, Grading, Observation
from trialground.envs.single_turn import SingleTurnEnv
from trialground.envs.text import extract_code, truncate_middle
from trialground.envs.tool_env import EnvSnapshot, ToolEnv, workspace_files
from trialground.envs.toolcalls import InvalidCall, ToolCall, format_tool_call, parse_tool_calls

__all__ = [
    "EnvSnapshot",
    "Environment",
    "Forkable",
    "Grading",
    "InvalidCall",
    "Observation",
    "SingleTurnEnv",
    "ToolCall",
    "ToolEnv",
    "extract_code",
    "format_tool_call",
    "parse_tool_calls",
    "truncate_middle",
    "workspace_files",
]
