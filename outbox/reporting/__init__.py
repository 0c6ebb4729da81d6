"""What staff read and do in admin: counts, the overview, a row's story, the levers."""
