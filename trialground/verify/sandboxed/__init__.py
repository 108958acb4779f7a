"""Programs that run inside a grading sandbox (standard library only, never imported by the host)."""
