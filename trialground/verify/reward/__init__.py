"""The reward: its data (`model`), the rubric of named parts, shaping measurements."""
