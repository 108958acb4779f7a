"""trialground's environment server as an OpenEnv environment package (see README.md)."""
