import riftco.train


def test_version():
    assert riftco.train.__version__
