"""apps: the reference training program (`python -m apps.train`) and its parts."""
