import riftco.optim


def test_version():
    assert riftco.optim.__version__
