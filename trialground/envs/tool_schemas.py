"""The tool environment's tools as JSON-schema function descriptions, for chat templates that take
`tools=` (Qwen, Llama 3, Mistral, ...): the template then writes them into the prompt in the form the
model was trained on. Derived from `TOOL_PARAMS`, so the two cannot disagree."""

from __future__ import annotations

from typing import Any

from trialground.envs.tools import TOOL_PARAMS

_DESCRIPTIONS = {
    "bash": ("Run a bash script in /workspace.", {"command": "the script"}),
    "python": ("Run Python code in /workspace.", {"code": "the program"}),
    "read_file": ("Show a file.", {"path": "file path, relative to /workspace"}),
    "write_file": (
        "Create or overwrite a file.",
        {"path": "file path, relative to /workspace", "content": "the whole new content"},
    ),
    "edit_file": (
        "Replace the one exact occurrence of `old` with `new` in a file.",
        {"path": "file path, relative to /workspace", "old": "text to replace", "new": "replacement"},
    ),
    "apply_patch": (
        "Apply a unified diff (as `git diff` writes it; several files, new and deleted files) to the "
        "workspace. All or nothing: a patch that does not apply changes nothing.",
        {"patch": "the unified diff; paths relative to /workspace, with or without a/ b/ prefixes"},
    ),
    "run_tests": ("Run the visible tests.", {}),
    "search": (
        "Lines containing a fixed string, as file:line:text (bounded; a summary line gives the totals).",
        {"pattern": "the exact text to find", "path": "a file or folder to search (default: everything)"},
    ),
    "read_lines": (
        "Show a page of a file: `count` numbered lines from line `start`.",
        {
            "path": "file path, relative to /workspace",
            "start": "first line, 1-based (default 1)",
            "count": "lines to show (default 20, at most 200)",
        },
    ),
    "fixes": (
        "Candidate one-line fixes of a repository task, numbered, at the library lines its failing tests "
        "point at (spectrum-based fault localization over its tests).",
        {},
    ),
    "apply_fix": (
        "Apply candidate `n` of the last fixes() listing, undoing the candidate applied before it; without "
        "`n`, the candidate after the one applied last.",
        {"n": "the candidate's number (default: the next)"},
    ),
    "submit": ("Finish; the workspace (or `answer`) is graded.", {"answer": "the answer, if one is asked"}),
}


def tool_schemas() -> list[dict[str, Any]]:
    """One `{"type": "function", "function": {...}}` entry per tool, in `TOOL_PARAMS` order."""
    out = []
    for name, (required, optional) in TOOL_PARAMS.items():
        description, params = _DESCRIPTIONS[name]
        properties = {p: {"type": "string", "description": params[p]} for p in (*required, *optional)}
        out.append(
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": description,
                    "parameters": {"type": "object", "properties": properties, "required": list(required)},
                },
            }
        )
    return out
