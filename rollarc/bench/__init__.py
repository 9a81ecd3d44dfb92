"""``rollarc bench NAME``: each module compares rollarc with its named baseline in one process run."""
