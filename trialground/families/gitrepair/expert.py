"""The `gitrepair` family's scripted expert: reads the breakage from the prompt and writes its own repair
(sed where the reference uses grep, `git revert` where it uses `git rm`, `HEAD@{1}`, `update-ref`, `reset
--hard`), never the reference."""

from __future__ import annotations

import re

from trialground.tasks.model import Task

_RULES: tuple[tuple[str, str], ...] = (
    (
        r"`git merge (\S+)` on main stopped with a conflict in (\S+):",
        "sed -i -e '/^<<<<<<< /d' -e '/^=======$/d' -e '/^>>>>>>> /d' {1}\ngit commit -q -a --no-edit\n",
    ),
    (
        r"Create a branch `rescue` that points at it",
        "git update-ref refs/heads/rescue \"$(git rev-parse 'HEAD@{{1}}')\"\n",
    ),
    (
        r"An earlier commit on main added (\S+) by mistake",
        'git revert --no-edit "$(git log -n 1 --format=%H --diff-filter=A -- {0})" >/dev/null\n',
    ),
    (
        r"The last (\d) commit\(s\) on main belong on a new branch (\S+)\.",
        "git checkout -q -b {1}\ngit checkout -q main\ngit reset -q --hard HEAD~{0}\n",
    ),
    (r"keep the untracked file (\S+) as it is", "git reset -q --hard HEAD\n"),
)


def solve(task: Task) -> str | None:
    """The expert's fix.sh for `task`, or None when it does not recognise the breakage."""
    for pattern, script in _RULES:
        m = re.search(pattern, task.prompt)
        if m:
            return "#!/bin/bash\n" + script.format(*m.groups())
    return None
