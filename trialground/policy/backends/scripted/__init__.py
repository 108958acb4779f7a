"""The scripted policy backend: fixed or computed responses (tests, demos)."""
