"""trialground.orchestrator."""
