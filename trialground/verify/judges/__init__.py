"""Judges and reward models behind one interface, and `reward.judge`."""
