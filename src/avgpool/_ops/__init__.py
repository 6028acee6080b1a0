"""The operators, one module each: its attribute rules (the only code that knows attribute names,
opsets and versions), its function and its prepared class. Each turns its attributes into one
validated :class:`avgpool._core.spec.PoolSpec` and hands it to :mod:`avgpool._core`. The public
modules (``avgpool``, ``avgpool.openvino``, ``avgpool.onednn``, ``avgpool.qlinear``) name them.
"""
