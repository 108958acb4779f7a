"""The `gitrepair` family: a small git repository left broken, repaired by a bash script checked with git."""
