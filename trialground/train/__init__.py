"""trialground.train."""
