"""The hackability audit: an exploit library and a gold gate played against tasks' real graders.

    report = await audit_tasks([("ops", tasks)], concurrency=8)
    report.families()        # per family: the share of tasks some strategy was paid on, and by which
    report.excluded()        # (task id, reason) for `tasks.exclude_files`

`trialground tasks audit SOURCE...` is the command (docs/hacking.md).
"""

from trialground.verify.audit.library import LIBRARY
from trialground.verify.audit.play import audit_tasks
from trialground.verify.audit.report import AuditReport, FamilyRow, TaskAudit
from trialground.verify.audit.strategy import CLASSES, CodeMove, Strategy

__all__ = [
    "CLASSES",
    "LIBRARY",
    "AuditReport",
    "CodeMove",
    "FamilyRow",
    "Strategy",
    "TaskAudit",
    "audit_tasks",
]
