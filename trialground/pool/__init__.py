"""trialground.pool."""
