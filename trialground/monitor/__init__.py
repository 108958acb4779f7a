"""trialground.monitor."""
