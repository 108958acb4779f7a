"""Tool-call parsing in both formats, malformed input, truncation and code extraction."""

from __future__ import annotations

import random

import pytest

from trialground.envs.text import extract_code, truncate_middle
from trialground.envs.toolcalls import InvalidCall, ToolCall, format_tool_call, parse_tool_calls


def test_json_tags_basic_and_string_arguments() -> None:
    text = 'thinking...\n<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call> tail'
    assert parse_tool_calls(text, "json_tags") == [ToolCall("bash", {"command": "ls -la"}, text[12:-5])]
    openai = '<tool_call>{"name": "read_file", "arguments": "{\\"path\\": \\"a.py\\"}"}</tool_call>'
    (call,) = parse_tool_calls(openai, "json_tags")
    assert isinstance(call, ToolCall) and call.arguments == {"path": "a.py"}
    (call,) = parse_tool_calls('<tool_call>{"name": "submit"}</tool_call>', "json_tags")
    assert call == ToolCall("submit", {}, call.raw)


def test_xml_format_round_trips_multiline_values() -> None:
    code = "def f():\n    return '<tag>'\n\n"
    text = format_tool_call("write_file", {"path": "f.py", "content": code}, "xml")
    (call,) = parse_tool_calls(text, "xml")
    assert isinstance(call, ToolCall) and call.arguments == {"path": "f.py", "content": code}
    bare = "<function=bash><parameter=command>echo hi</parameter></function>"
    assert parse_tool_calls(bare, "xml") == [ToolCall("bash", {"command": "echo hi"}, bare)]


def test_auto_reads_both_in_order_and_json_only_ignores_xml() -> None:
    text = (
        format_tool_call("bash", {"command": "a"}, "xml")
        + "\n"
        + format_tool_call("bash", {"command": "b"}, "json_tags")
        + "\n<function=python><parameter=code>c</parameter></function>"
    )
    calls = parse_tool_calls(text, "auto")
    assert [c.arguments for c in calls if isinstance(c, ToolCall)] == [
        {"command": "a"},
        {"command": "b"},
        {"code": "c"},
    ]
    json_only = parse_tool_calls(text, "json_tags")
    assert isinstance(json_only[0], InvalidCall) and isinstance(json_only[1], ToolCall)
    assert len(json_only) == 2


@pytest.mark.parametrize(
    ("text", "fmt", "reason"),
    [
        ('<tool_call>{"name": "bash", "arguments": {"command": "ls"}', "json_tags", "not closed"),
        ("<tool_call>{bad json}</tool_call>", "json_tags", "not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "json_tags", "must be an object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "json_tags", "no string 'name'"),
        ('<tool_call>{"name": "bash", "arguments": [1]}</tool_call>', "json_tags", "must be a JSON object"),
        (
            '<tool_call>{"name": "bash", "arguments": "{oops"}</tool_call>',
            "json_tags",
            "string that is not JSON",
        ),
        ("<function=bash><parameter=command>ls</parameter>", "xml", "not closed with </function>"),
        ("<function=bash><parameter=command>ls</function>", "xml", "not closed with </parameter>"),
        ("<function=><parameter=a>1</parameter></function>", "xml", "empty tool name"),
        ("<function=f><parameter=a>1</parameter><parameter=a>2</parameter></function>", "xml", "given twice"),
        ("<function=f>stray<parameter=a>1</parameter></function>", "xml", "unexpected text"),
    ],
)
def test_malformed_calls_are_invalid_with_reason(text: str, fmt: str, reason: str) -> None:
    calls = parse_tool_calls(text, fmt)  # type: ignore[arg-type]
    assert len(calls) == 1 and isinstance(calls[0], InvalidCall)
    assert reason in calls[0].reason


def test_parser_never_raises_on_garbage() -> None:
    rng = random.Random(0)
    alphabet = ["<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
                ">",
                "{", "}", '"name"', ":", '"bash"', ",", "\n", "x", "[", "]", '"arguments"']  # fmt: skip
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        for fmt in ("json_tags", "xml", "auto"):
            for call in parse_tool_calls(text, fmt):  # type: ignore[arg-type]
                assert isinstance(call, ToolCall | InvalidCall)
    assert parse_tool_calls("plain text without calls") == []


def test_truncate_middle_keeps_head_tail_and_counts() -> None:
    text = "".join(f"line {i}\n" for i in range(5000))
    out = truncate_middle(text, 300)
    assert len(out) <= 300 and out.startswith("line 0\n") and out.endswith("line 4999\n")
    dropped = int(out.split("[... ")[1].split(" chars")[0])
    marker = f"\n[... {dropped} chars dropped ...]\n"
    assert len(out) - len(marker) + dropped == len(text)
    assert truncate_middle("short", 300) == "short"
    for budget in (64, 65, 100, 1000):
        assert len(truncate_middle("z" * 10_000, budget)) <= budget


def test_extract_code() -> None:
    assert extract_code("Here:\n```python\nprint(1)\n```\nand\n```\nother\n```") == "print(1)\n"
    assert extract_code("```py\nx = 1\n```\n```python\nx = 2\n```") == "x = 2\n"
    assert extract_code("```js\nlet a\n```") == "let a\n"
    assert extract_code("def f():\n    return 1\n") == "def f():\n    return 1\n"
    assert (
        extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1\n"
    )  # cut off mid-block
    assert extract_code("   \n") == ""


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "bash", "arguments": {"n": ' + "9" * 5000 + "}}",
        '{"name": "bash", "arguments": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"name": "bash", "arguments": "{\\"n\\": ' + "7" * 5000 + '}"}',
        '{"name": "bash", "arguments": "' + "[" * 5000 + "]" * 5000 + '"}',
    ],
    ids=["big_int", "deep", "big_int_in_string_args", "deep_string_args"],
)
def test_huge_numbers_and_deep_nesting_are_invalid_calls(body: str) -> None:
    """`json.loads` raises ValueError / RecursionError on these; parsing must stay total."""
    for fmt in ("json_tags", "auto"):
        calls = parse_tool_calls(f"<tool_call>{body}</tool_call>", fmt)
        assert len(calls) == 1 and isinstance(calls[0], InvalidCall), calls
        assert "nested" in calls[0].reason or "digits" in calls[0].reason


@pytest.mark.parametrize("style", ["tags", "llama3", "mistral"])
def test_gateway_styles_stay_total_on_hostile_json(style: str) -> None:
    from trialground.gateway import toolstyle

    deep = "[" * 5000 + "]" * 5000
    big = "9" * 5000
    for inner in (deep, big):
        call = '{"name": "bash", "arguments": {"x": ' + inner + "}}"
        text = {"tags": f"<tool_call>{call}</tool_call>", "llama3": call, "mistral": f"[TOOL_CALLS][{call}]"}
        parsed = toolstyle.parse(style, text[style])
        assert parsed.calls == ()


def test_reports_from_the_sandbox_are_parsed_totally() -> None:
    """The repair listing and the patch tool read a JSON line a process the workspace's code controls
    printed: 5,000 nested brackets or a 5,000-digit number are no result, never a RecursionError."""
    from trialground.envs import patching, repair

    for hostile in ("[" * 5000 + "]" * 5000, '{"ok": true, "n": ' + "9" * 5000 + "}"):
        assert repair.parse_result(repair.RESULT_PREFIX + hostile) is None
        assert patching.parse_result(hostile) is None
