"""Price polling: what a run asks the marketplaces, and the one rule that keeps their answers
(history, listing state, statistics) for polls and the dispatcher's re-fetches alike."""
