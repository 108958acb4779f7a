"""The `regex` family: one regular expression extracting one kind of item, checked on a hidden text."""
