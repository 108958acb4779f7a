"""The bwrap backend's internals: supervisor, fork-server template, cgroups, seccomp, mounts, network."""
