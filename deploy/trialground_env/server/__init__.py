"""The server entry points: `main` (`uv run --project . server`) and `app` (`server.app:app`)."""
