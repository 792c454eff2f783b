import riftco.autograd


def test_version():
    assert riftco.autograd.__version__
