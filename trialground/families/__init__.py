"""Task families: one folder each, holding everything a domain needs.

    trialground/families/<name>/
        __init__.py      empty (the core never imports a family by name)
        source.py        the generator: `load(SourceRequest) -> list[Task]`, registered in
                         `trialground.tasks.sources` by dotted path
                         ("trialground.families.<name>.source:load")
        check_*.py       programs shipped into the grading sandbox (real files lint and types see)
        expert.py        the scripted expert: `solve(task) -> str | None`, from the prompt and workspace only
        kinds.py         the family's own verifier kind, only if no built-in kind fits

Families are independent of each other (an import-linter contract) and may import `trialground.tasks`,
`trialground.verify` and `trialground.sandbox`. `trialground.families.experts` measures an expert's solve
share through the real grader (`trialground tasks expert SOURCE`).
"""
