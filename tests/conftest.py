import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, max_examples=int(os.environ.get("AVGPOOL_EXAMPLES", "150")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("default")


@pytest.fixture
def exact_from_k5():
    """The exact float32 running sums from k5 on every CPU, as with AVX-512
    (avgpool.tables.exact_min_kernel: k11 without), for tests that put their windows there."""
    from avgpool import tuning

    with tuning.tuned(exact_running_min_kernel=5):
        yield
