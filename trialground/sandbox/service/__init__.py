"""The sandbox service: the `Sandbox` interface over HTTP, and its front door."""
