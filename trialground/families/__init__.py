"""Task families: one folder each, holding everything a domain needs.

    trialground/families/<name>/
        __init__.py      empty (the core never imports a family by name)
        source.py        the generator: `load(SourceRequest) -> list[Task]`, registered in
                         `trialground.tasks.sources` by dotted path
                         ("trialground.families.<name>.source:load")
        check_*.py       programs shipped into the grading sandbox (real files lint and types see)
        expert.py        the scripted expert: `solve(task) -> str | None`, from the prompt and workspace only
        kinds.py         the family's own verifier kind, only if no built-in kind fits (it owns its
                         resource: `VerifierKind.resource`, see `trialground.verify.kinds.context`)
        assets/          files that are not Python (scripts, services, data sets), read beside the source

Families are independent of each other (an import-linter contract; a family that builds on another asks
the source registry for its tasks by name, as `hackable` does with `agent:repair`) and may import
`trialground.tasks`, `trialground.verify` and `trialground.sandbox`; what several share lives beside the
folders (`draw.py`, `programs.py`). The orchestrator, the pool and the rollout import no family.
`trialground.families.experts` measures an expert's solve share through the real grader
(`trialground tasks expert SOURCE`).
"""
