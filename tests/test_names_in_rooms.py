"""A plugin's name stays in its room: outside the folders of its set, no code compares a backend, kind, tool,
estimator, loss or judge name as a string (the core asks a plugin's capabilities instead), and no config
model lists such names in a `Literal` (they are names a registry checks, so a plugin's name is as good as a
built-in's).

A name is any registered name of the sets below; a comparison is `==`, `!=`, `in` or `not in` against a
string literal, a literal tuple, list or set of them, or a module constant bound to one. Each exception is in
`ALLOWED`, with the reason it is not a name compared where a capability should be asked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import trialground
from trialground.envs.kinds import KINDS as ENV_KINDS
from trialground.envs.tools.registry import TOOLS
from trialground.plugin import Plugin
from trialground.policy.backends import BACKENDS as POLICY_BACKENDS
from trialground.pool.backends import BACKENDS as POOL_BACKENDS
from trialground.registry import Registry
from trialground.sandbox.backends import BACKENDS as SANDBOX_BACKENDS
from trialground.tasks.verifiers import KINDS as VERIFIER_KINDS
from trialground.train.estimators import ESTIMATORS
from trialground.train.losses import LOSSES
from trialground.verify.judges.config import JUDGES

PACKAGE = Path(trialground.__file__).parent
# each set: its registry and its rooms (folders or modules, relative to the package)
SETS: dict[str, tuple[Registry, tuple[str, ...]]] = {  # type: ignore[type-arg]
    "sandbox backend": (SANDBOX_BACKENDS, ("sandbox/backends/",)),
    "policy backend": (POLICY_BACKENDS, ("policy/backends/",)),
    "pool backend": (POOL_BACKENDS, ("pool/backends.py",)),
    "environment kind": (ENV_KINDS, ("envs/kinds/",)),
    "tool": (TOOLS, ("envs/tools/",)),
    "estimator": (ESTIMATORS, ("train/estimators/",)),
    "loss": (LOSSES, ("train/losses/",)),
    "judge kind": (JUDGES, ("verify/judges/",)),
    "verifier kind": (VERIFIER_KINDS, ("tasks/verifiers.py", "verify/kinds/")),
}

# (module, name) -> why the comparison there is not a plugin's name compared in place of a capability
ALLOWED = {
    (
        "orchestrator/run_config.py",
        "ray",
    ): "`cluster` is the deployment switch (one process or a Ray cluster: "
    "see LITERALS), not a pool backend's name; it picks the `ray` pool backend and Ray ranks",
    ("orchestrator/wiring.py", "ray"): "the same `cluster` switch: grading sandboxes go on Ray with the pool",
    ("orchestrator/ranks.py", "ray"): "the same `cluster` switch: data-parallel ranks start through Ray",
    (
        "orchestrator/memory_check.py",
        "ray",
    ): "the same `cluster` switch: Ray starts trainer.data_parallel ranks",
    ("cli/tasks_cmd.py", "hf"): "`hf` here is the `tasks` command's Hugging Face dataset source, a homonym",
    ("policy/sampling_parity.py", "vllm"): "the server's reported engine (its /server_info), not our backend",
    ("envs/text.py", "python"): "a Markdown fence's language tag, a homonym of the tool",
    ("gateway/conversation.py", "tool"): "the chat message role `tool`, a homonym of the environment kind",
    ("train/sft.py", "tool"): "the chat message role `tool`, a homonym of the environment kind",
    ("verify/grader.py", "judge"): "the judge verifier kind asks for the run's judge (its resource)",
    ("rollout/swe_expert.py", "submit"): "the scripted expert reads its own plan of calls (data it wrote)",
    ("verify/reward/shaping.py", "submit"): "the efficiency part counts the calls before the episode's end; "
    "a tool capability (`ToolCaps.ends_episode`) is not on the Action record it reads",
    ("gateway/conformance.py", "exact"): "the conformance episode builds its own exact-answer task",
    ("envs/single_turn.py", "code_tests"): "single-turn code tasks: the completion's code block is the "
    "submission (verifier kinds own no submission format yet)",
    ("tasks/hf_source.py", "code_tests"): "the Hugging Face source builds tasks of the kind it maps rows to",
    ("tasks/hf_source.py", "exact"): "the Hugging Face source builds tasks of the kind it maps rows to",
    ("tasks/hf_source.py", "math"): "the Hugging Face source builds tasks of the kind it maps rows to",
    ("tasks/hf_source.py", "numeric"): "the Hugging Face source builds tasks of the kind it maps rows to",
    ("tasks/hf_source.py", "regex"): "the Hugging Face source builds tasks of the kind it maps rows to",
    **{
        ("verify/validate.py", kind): "static validation is a ladder over the built-in verifier kinds "
        "(a kind-owned `validate` replaces it when verifier kinds own their checks)"
        for kind in ("code_tests", "check_program", "swe_tests", "numeric", "regex", "math")
    },
}

# config-model `Literal` fields whose values are not an open set's names, and why
LITERALS = {
    ("RunConfig", "cluster"): "the deployment, one process or a Ray cluster: two ways to run, each a "
    "different program path (Ray ranks, grading on workers); the pool backend it implies is a registry name",
    ("TrainerConfig", "dist_backend"): "torch.distributed's own process-group backends (gloo, nccl): "
    "torch's fixed set, which no plugin can extend",
    ("Message", "role"): "chat message roles of the OpenAI API (`tool` is a role, a homonym of the kind)",
    ("TemplateReport", "message_text"): "how a chat template kept a message's text (`exact` a homonym)",
    ("SandboxConfig", "launcher"): "how the bwrap backend starts a sandbox (its fork server, or the bwrap "
    "program itself): a setting of that backend that still sits in the shared section, not a backend name",
    ("DedupFinding", "kind"): "what a duplicate finding found (same task, same prompt, near duplicate, "
    "eval overlap): a closed set of outcomes of `tasks dedup`, not a plugin",
}


def _names() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    out: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for what, (registry, rooms) in SETS.items():
        for name in registry.names():
            out.setdefault(name, []).append((what, rooms))
    return out


def _literals(node: ast.AST, constants: dict[str, list[str]]) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [v for e in node.elts for v in _literals(e, constants)]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("frozenset", "set")
    ):
        return [v for a in node.args for v in _literals(a, constants)]
    if isinstance(node, ast.Name):
        return constants.get(node.id, [])
    return []


def _compared(source: str) -> list[tuple[int, str]]:
    """(line, literal) of every string compared in `source`."""
    tree = ast.parse(source)
    constants: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            constants[node.targets[0].id] = _literals(node.value, {})
    return [
        (node.lineno, value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for side in (node.left, *node.comparators)
        for value in _literals(side, constants)
    ]


def test_no_plugin_name_is_compared_outside_its_room() -> None:
    names = _names()
    found, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        for line, value in _compared(path.read_text()):
            for what, rooms in names.get(value, []):
                if any(module.startswith(room) for room in rooms):
                    continue
                if (module, value) in ALLOWED:
                    used.add((module, value))
                    continue
                found.append(f"{module}:{line}: the {what} name {value!r} compared (ask its capabilities)")
    assert not found, "\n".join(found)
    assert not set(ALLOWED) - used, f"allowed but no longer found: {sorted(set(ALLOWED) - used)}"


def test_the_check_finds_a_name_compared_and_not_a_capability_asked() -> None:
    compared = 'ROOMS = ("vllm", "hf")\nif config.backend == "bwrap" or policy.backend in ROOMS:\n    pass\n'
    assert [v for _, v in _compared(compared)] == ["bwrap", "vllm", "hf"]
    asked = "if BACKENDS.lookup(config.backend).capabilities.isolated:\n    pass\n"
    assert _compared(asked) == []


def _literal_values(node: ast.AST, aliases: dict[str, list[str]]) -> list[str]:
    """The strings a field's annotation lists in `Literal[...]` (through module-level aliases)."""
    out: list[str] = []
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Subscript)
            and getattr(sub.value, "id", getattr(sub.value, "attr", "")) == "Literal"
        ):
            out += _literals(sub.slice, {})
        elif isinstance(sub, ast.Name):
            out += aliases.get(sub.id, [])
    return out


def _literal_fields(source: str) -> list[tuple[str, str, list[str]]]:
    """(class, field, values) of every class attribute annotated with a `Literal` of strings."""
    tree = ast.parse(source)
    aliases = {
        node.targets[0].id: _literal_values(node.value, {})
        for node in tree.body
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    }
    return [
        (cls.name, item.target.id, values)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for item in cls.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
        if (values := _literal_values(item.annotation, aliases))
    ]


def test_no_config_model_lists_plugin_names_in_a_literal() -> None:
    names = _names()
    found, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for cls, field, values in _literal_fields(path.read_text()):
            open_set = field in ("backend", "kind", "algorithm", "loss") or field.endswith("_backend")
            if not (open_set or any(v in names for v in values)):
                continue
            if (cls, field) in LITERALS:
                used.add((cls, field))
                continue
            module = path.relative_to(PACKAGE).as_posix()
            found.append(f"{module}: {cls}.{field}: Literal{values} (names a registry should check)")
    assert not found, "\n".join(found)
    assert not set(LITERALS) - used, f"allowed but no longer found: {sorted(set(LITERALS) - used)}"


def test_the_literal_check_reads_aliases() -> None:
    source = 'Kind = Literal["bwrap", "x"]\nclass C(BaseModel):\n    backend: Kind = "x"\n    n: int = 1\n'
    assert _literal_fields(source) == [("C", "backend", ["bwrap", "x"])]


def test_every_set_is_a_plugin_registry() -> None:
    for what, (registry, rooms) in SETS.items():
        assert registry.names(), what
        for room in rooms:
            assert (PACKAGE / room).exists(), (what, room)
        if what != "verifier kind":  # verifier kinds take the plugin shape with their families
            assert all(isinstance(e, Plugin) for e in registry.entries()), what
