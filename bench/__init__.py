"""Benchmarks for the goals of the performance issue (`make bench`; see `bench.run`).

Nothing here is collected by pytest (`testpaths = ["tests"]`), and nothing here
touches `./data`: every stage runs in a child process with its own temporary
data dir.
"""
