import riftco.nn


def test_version():
    assert riftco.nn.__version__
