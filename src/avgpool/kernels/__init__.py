"""Compute kernels. They take arrays and integers, never dicts or strings, and validate nothing."""
