"""The tools of the multi-turn environment: one module per tool, each a `Tool` plugin, and the registry
(`registry.TOOLS`) the prompt's list, the JSON schemas and the TRL adapter are generated from.

Built-in: ``bash(command)``, ``python(code)``, ``read_file(path)``, ``write_file(path, content)``,
``edit_file(path, old, new)``, ``run_tests()``, ``search(pattern, path?)``, ``read_lines(path, start?,
count?)``, ``apply_patch(patch)``, ``fixes()``, ``apply_fix(n?)`` and ``submit(answer?)``.

To add a tool, write a module that defines a `Tool` (`base.py`) whose factory is
`async def run(call: ToolCall) -> ToolOutcome`, and name it in a run config as
`env.tools: ["package.module:TOOL"]` (with `params` for its own settings model), or register it in
`registry.TOOLS`.
"""
