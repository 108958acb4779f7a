"""Chat templates for tokenizers that have none: base models render prompts and episodes with these.

Every prompt and multi-turn episode is rendered through a chat template (`rollout/chat.py` keeps the
rendering token-exact). A pretrained base model's tokenizer usually has none; `policy.chat_template`
chooses what is used:

- `auto` (default): the tokenizer's own template, else `plain`;
- `own`: the tokenizer's own template, and a tokenizer without one is refused;
- a built-in name (`plain`);
- the path of a Jinja file (a Hugging Face chat template).

`plain` writes a conversation as a base model reads text, with nothing around the first prompt:

    <bos>{system}\\n\\n{first user message}{assistant}{tool calls}<eos>
    \\n\\n{observation}\\n\\n{assistant}<eos>...

- a system message is its text and a blank line; the first user message is its text as it is, so the
  model continues it (a completion-style prompt such as a function signature and docstring is continued
  by the function's body);
- an assistant turn is its text, then each of its tool calls as
  `<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`, then the eos token (which the model
  emits to end its turn, or which is appended when a stop string ended it);
- every later user or tool message (an environment's answer) is its text between blank lines:
  `\\n\\n{text}\\n\\n`, and the model's next turn follows it;
- the generation prompt adds nothing. The bos token starts the text when the tokenizer has one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

PLAIN = (
    "{%- if bos_token %}{{ bos_token }}{% endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}"
    "{{ message['content'] }}{{ '\\n\\n' }}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{%- if message['content'] %}{{ message['content'] }}{% endif -%}"
    "{%- if message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- for call in message['tool_calls'] -%}"
    "{{ '<tool_call>\\n' }}"
    "{{ {'name': call['function']['name'], 'arguments': call['function']['arguments']} | tojson }}"
    "{{ '\\n</tool_call>' }}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{ eos_token }}"
    "{%- elif loop.first or messages[loop.index0 - 1]['role'] == 'system' -%}"
    "{{ message['content'] }}"
    "{%- else -%}"
    "{{ '\\n\\n' }}{{ message['content'] }}{{ '\\n\\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)

BUILT_IN = {"plain": PLAIN}
CHOICES = ("auto", "own", *BUILT_IN)


def template_problem(choice: str) -> str | None:
    """Why `choice` names no template (neither a keyword, a built-in nor a readable file), or None."""
    if choice in CHOICES:
        return None
    path = Path(choice).expanduser()
    if not path.is_file():
        return f"policy.chat_template {choice!r} is neither one of {list(CHOICES)} nor a readable Jinja file"
    return None


def choose_template(tokenizer: Any, choice: str) -> str | None:
    """The chat template `choice` gives this tokenizer (see the module docstring): None for the
    tokenizer's own; ValueError when there is none."""
    own = getattr(tokenizer, "chat_template", None)
    if choice in ("own", "auto") and own:
        return None
    if choice == "own":
        raise ValueError(
            "the tokenizer has no chat template (tokenizer_config.json chat_template or "
            "chat_template.jinja), and policy.chat_template is 'own': set it to 'auto' or 'plain' for a "
            "base model, or to a Jinja file"
        )
    if choice == "auto":
        return PLAIN
    if choice in BUILT_IN:
        return BUILT_IN[choice]
    problem = template_problem(choice)
    if problem is not None:
        raise ValueError(problem)
    return Path(choice).expanduser().read_text()


def with_template(tokenizer: Any, choice: str) -> Any:
    """`tokenizer` with the chat template `choice` set on it (the same object)."""
    template = choose_template(tokenizer, choice)
    if template is not None:
        tokenizer.chat_template = template
    return tokenizer
