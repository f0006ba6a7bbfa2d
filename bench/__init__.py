"""Benchmarks: each builds its data, runs Causeway and a baseline in the same run, and
prints one table (figure, Causeway, baseline, ratio). ``--quick`` is the CI smoke run."""
