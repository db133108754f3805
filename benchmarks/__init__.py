"""Benchmarks: each compares pypto against numpy (and PyTorch where installed) in one run."""
