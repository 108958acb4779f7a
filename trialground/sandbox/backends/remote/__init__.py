"""The remote sandbox backend: sandboxes of the sandbox service, over HTTP."""
