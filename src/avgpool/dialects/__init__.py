"""Dialects: the only code that knows attribute names, opsets and versions.

Each turns its attributes into one validated :class:`avgpool.spec.PoolSpec`.
"""
